"""A layer's instruction stream: the host's copy of the loop walker's loops.

:func:`layer_program` computes, for one layer descriptor, exactly the sequence of events the
controller's loop walker (:class:`bpsa.gateware.controller.walker.LoopWalker`) produces for
it: first the set-up programs on integers (:func:`bpsa.plan.setup.run`, the plan registers;
a refused layer raises :class:`bpsa.plan.grammar.Refusal`), then the phase's loops in plain
Python, a straight port of the walker's FSM for that phase (its per-step arithmetic on the
48-bit multiplier / divider, its registers' widths, the row-band programs of
:mod:`bpsa.plan.bands` through :func:`bpsa.plan.grammar.evaluate`). An arithmetic step that
overflows 48 bits fails the layer in hardware; here it raises ``Refusal`` (``TOO_LARGE``).
``tests/test_plan_program.py`` checks the stream event for event against the RTL walker.

Events (frozen dataclasses, in the walker's order)
    :class:`Step`
        The walker's ``new_step`` pulse: the next run starts a new step (the step scheduler
        stores the finished step, if one is saved, and clears P first).
    :class:`Load`
        One load handed to the load unit (a ``load`` handshake), the fields of
        :func:`bpsa.gateware.control.load_unit.load_layout`; ``target`` and ``cache`` are
        the ints of its ``Target`` and ``Cache`` (:data:`TARGET`, :data:`CACHE`). ``bank`` is
        explicit: the walker's X bank (``xbank``) for the X of the forward and zero-free phases,
        otherwise the step scheduler's bank, which is 0 at the layer's start and toggles at
        every run it starts (so: the parity of the runs started before the load). The load
        unit may answer with ``hit`` (it holds the slice already); the load was handed over
        all the same.
    :class:`Run`
        A run the step scheduler starts (``run_req`` answered by ``started``), with the
        walker outputs the accelerator's consumers of that phase read for it (the engine, the
        result addressing, the scheduler's ``clear_words``): :data:`RUN_FIELDS`. The others
        are left ``None``: the walker's registers are shared by the phases and hold leftovers
        of earlier layers in the fields a phase does not use. Every consumer latches its
        fields at the run's start (``eng_start``, the cycle of ``started``), except
        :class:`bpsa.gateware.control.result_addressing.FcDrainResults`, which reads
        ``fc_dw_p0`` live (it is constant through an FC layer).
    :class:`Save`
        The walker's ``save`` pulse with ``save_step``: the step whose last run just started,
        for its store; ``final``: the layer's last step (the walker pulses ``final`` only
        together with ``save``).
    :class:`Save2`
        FC backward: the ``save2`` pulse with ``save2_step`` (the input block's dW rows, stored
        after the step's dX rows), in the cycle of the block's last :class:`Save`.
    :class:`Last`
        The walker asserts ``last``: the scheduler stores the last step, then the layer is
        done.

The walker's X bank register (``xbank``) is not reset between layers: :func:`layer_program`
takes its value at the layer's start (``xbank``, default 0) and :func:`layer_program_state`
also returns its value at the end.

Loop order per phase (outermost first; "run" is one group, a :class:`Run`)
    forward (MODE 0) and channel-first forward (MODE 2)
        images; steps of ``kb`` output-channel blocks; row bands of output rows (a step:
        :class:`Step` per (image, blocks, band)); groups of ``cg`` input channels (X of a
        group loaded once, into the X bank of the group's parity; channel-first: one channel
        block, its band's pixels in one load); the step's blocks (W of the block, a run).
    loss, BP-im2col (MODE 0)
        images; row bands of dX; dX channel blocks (a step each); groups of output channels
        (W and dY of the group, a run).
    gradient, BP-im2col (MODE 0)
        output-channel blocks; input-channel groups (a step each); images; row bands of dY;
        groups of output channels (dY and X of the group, a run).
    gradient, zero-free (MODE 1)
        blocks of ``kb`` output-channel blocks; steps of ``cn`` input-channel blocks of ``B``
        channels; images; row bands of dY (X of the step's blocks for the band loaded, block
        after block, into the X bank of the band's parity); output-channel blocks (dY of the
        block); the step's input-channel blocks (a run each, X from ``x_off``; all but the
        first HOLD, reading the same dY).
    loss, zero-free (MODE 1)
        steps of ``cn`` blocks of ``cols`` input channels; row bands of dX; steps of ``zn``
        images (their dX bands in P; ``cn`` or ``zn`` is 1; a :class:`Step` each); groups of
        ``kg`` blocks of output channels; images (dY of the group, into the X bank of its
        parity); the step's input-channel blocks (a run each). W of the step's blocks is one
        load into a half of buffer B when it fits, of every output channel (once a step) or
        else of the group (when it changes); the runs after the first HOLD it, each from its
        ``w_off``. Otherwise a block's W a run.
    FC backward
        input blocks; batch chunks (a step each; the block's last chunk also saves the dW
        rows, :class:`Save2`); output blocks (dY, X and W of the block, a run).
    pooling forward and backward
        steps of ``pg`` planes (in memory order), each in row bands of output (forward) or dX
        (backward) rows; a run per band, each a step of its own (X, unless an average's
        backward without RELU, then dY for the backward).
"""

from dataclasses import dataclass, fields

from bpsa.plan import bands as band_programs
from bpsa.plan import setup
from bpsa.plan.grammar import Refusal, evaluate
from bpsa.spec.errors import AccelError
from bpsa.spec.numeric import element_bytes
from bpsa.spec.regmap import Mode, Phase, PoolKind

__all__ = ["CACHE", "Last", "Load", "PHASES", "RUN_FIELDS", "Run", "Save", "Save2", "Step",
           "TARGET", "layer_program", "layer_program_state", "program_key"]

#: The ``Target`` values of the load unit (:class:`bpsa.gateware.control.load_unit.Target`).
TARGET = {"FWD_X": 0, "FWD_W": 1, "BWD_A": 2, "BWD_B": 3, "POOL": 4, "CF_X": 5, "CF_XS": 6}
#: The ``Cache`` values of the load unit (:class:`bpsa.gateware.control.load_unit.Cache`).
CACHE = {"A": 0, "B": 1, "W": 2, "POOL_X": 3, "POOL_DY": 4, "CF": 5, "CF_XS": 6}

_W = 48                       # the walker's counts, sizes and strides
_MASK = (1 << _W) - 1
_PTR = 33                     # its pointers (and the payloads' addresses)


# --- events -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """``new_step``: the next run starts a new step."""


@dataclass(frozen=True)
class Load:
    """A load handed to the load unit (:func:`bpsa.gateware.control.load_unit.load_layout`):
    ``count`` runs of ``run_len`` elements ``stride`` bytes apart from ``addr``, into bank
    ``bank`` of ``target``'s buffer from word ``offset``, a run every ``run_words`` words,
    ``lanes`` elements a word; ``length`` (their total) and ``addr`` name the slice ``cache``
    records."""
    target: int
    cache: int
    bank: int
    offset: int
    addr: int
    length: int
    lanes: int
    count: int
    run_len: int
    run_words: int
    stride: int


@dataclass(frozen=True)
class Run:
    """A run the step scheduler starts, with the walker outputs its phase's consumers read
    (:data:`RUN_FIELDS`; the others are ``None``). ``run``: ``batch``, ``channels``,
    ``out_channels``, ``height``, ``out_height``, ``pad_top``, ``pad_bottom``
    (:func:`bpsa.gateware.controller.walker.engine_run_layout`); ``zrun``: ``pt_q`` ...
    ``plane`` (``zero_free_run_layout``); ``prun``: ``y0`` ... ``d_offset``
    (``pool_walk_layout``); ``geometry``: ``p_row`` ... ``clear_words``
    (``run_geometry_layout``); ``xbank`` and ``x_off``; ``hold``: the RUN's HOLD flag (it
    reads the half of buffer B the run before it read)."""
    batch: int = None
    channels: int = None
    out_channels: int = None
    height: int = None
    out_height: int = None
    pad_top: int = None
    pad_bottom: int = None
    pt_q: int = None
    pt_r: int = None
    pw_q: int = None
    pw_r: int = None
    dh_q: int = None
    dh_r: int = None
    dw_q: int = None
    dw_r: int = None
    kblocks: int = None
    kvalid: int = None
    plane: int = None
    y0: int = None
    rows: int = None
    xlo: int = None
    dlo: int = None
    drows: int = None
    q0: int = None
    rem0: int = None
    x_plane: int = None
    d_plane: int = None
    d_offset: int = None
    p_row: int = None
    row_base: int = None
    kt_rows: int = None
    fc_o0: int = None
    fc_dw_p0: int = None
    clear_words: int = None
    xbank: int = None
    x_off: int = None
    w_off: int = None
    hold: bool = False

    def __repr__(self):
        return "Run(" + ", ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self)
                                  if getattr(self, f.name) is not None) + ")"


@dataclass(frozen=True)
class Save:
    """``save`` with ``save_step``: ``rows`` rows of ``length`` elements, ``stride`` bytes
    apart from ``addr`` in memory, ``nb`` words apart in P; ``final``: the layer's last
    step."""
    rows: int
    length: int
    nb: int
    stride: int
    addr: int
    final: bool


@dataclass(frozen=True)
class Save2:
    """FC backward's ``save2`` with ``save2_step``: ``rows`` dW rows from P word ``p0`` to
    ``addr``."""
    rows: int
    p0: int
    addr: int


@dataclass(frozen=True)
class Last:
    """``last``: the layer's last step is stored, then the layer is done."""


#: The program keys (:func:`program_key`).
PHASES = ("forward", "cf_forward", "loss", "gradient", "zf_loss", "zf_gradient", "fc",
          "pool_forward", "pool_backward")

_ENGINE = ("channels", "out_channels", "height", "out_height", "pad_top", "pad_bottom")
#: The :class:`Run` fields of each program (from the wiring of
#: :class:`bpsa.gateware.accelerator.Accelerator`):
#:
#: - forward: the forward engine's layer (``channels``, ``out_channels``, ``height``,
#:   ``pad_top``, ``pad_bottom``; X at ``xbank``), ``ForwardResults`` (``row_base``,
#:   ``p_row``);
#: - channel-first forward: its front end's run (``channels``, ``height``, ``rows`` (the
#:   band's output rows, ``prun.rows``), ``pad_top``, ``xbank``, ``x_off``: the image's X in
#:   the half when a step's images run one a run) and ``ForwardResults``;
#: - loss, gradient: the backward engine's layer (``run`` but ``batch``) and
#:   ``BackwardResults`` (``row_base``, ``p_row``, ``kt_rows``);
#: - FC backward: the backward engine's FC (``batch``, ``channels``, ``out_channels``; its
#:   FC walker reads no rows or padding), ``BackwardResults`` and ``FcDrainResults``
#:   (``fc_o0``, ``kt_rows``, ``p_row``, ``fc_dw_p0``);
#: - zero-free gradient: ``zg_layer`` (``channels``, ``height``, ``out_height``,
#:   ``pad_top``, ``xbank``, ``x_off``) and ``ZeroFreeResults``;
#: - zero-free loss: ``zl_layer`` (``height``, ``out_height``, ``pad_top``, every ``zrun``
#:   field, ``xbank``, ``w_off``) and ``ZeroFreeResults``;
#: - pooling: the pooling unit's layer (``channels`` as its planes, the ``prun`` fields,
#:   ``p_row``); its forward reads neither the dY fields (``dlo``, ``drows``, ``d_plane``,
#:   ``d_offset``) nor the backward walk's start ``q0`` / ``rem0`` (which the walker does not
#:   set for a forward);
#: - and every phase: ``clear_words`` (the step scheduler's clear of the next step's P).
RUN_FIELDS = {
    "forward": ("channels", "out_channels", "height", "pad_top", "pad_bottom", "xbank",
                "row_base", "p_row", "clear_words"),
    "cf_forward": ("channels", "height", "rows", "pad_top", "xbank", "x_off", "row_base",
                   "p_row", "clear_words"),
    "loss": _ENGINE + ("row_base", "p_row", "kt_rows", "clear_words"),
    "gradient": _ENGINE + ("row_base", "p_row", "kt_rows", "clear_words"),
    "fc": ("batch", "channels", "out_channels", "row_base", "p_row", "kt_rows", "fc_o0",
           "fc_dw_p0", "clear_words"),
    "zf_gradient": ("channels", "height", "out_height", "pad_top", "xbank", "x_off",
                    "row_base", "p_row", "clear_words"),
    "zf_loss": ("height", "out_height", "pad_top", "pt_q", "pt_r", "pw_q", "pw_r", "dh_q",
                "dh_r", "dw_q", "dw_r", "kblocks", "kvalid", "plane", "xbank", "w_off",
                "row_base", "p_row", "clear_words"),
    "pool_forward": ("channels", "y0", "rows", "xlo", "x_plane", "p_row", "clear_words"),
    "pool_backward": ("channels", "y0", "rows", "xlo", "dlo", "drows", "q0", "rem0",
                      "x_plane", "d_plane", "d_offset", "p_row", "clear_words"),
}


def program_key(desc):
    """The walker program of descriptor ``desc`` (one of :data:`PHASES`)."""
    phase, mode = Phase(desc["phase"]), desc.get("mode", 0)
    if phase == Phase.FORWARD:
        return "cf_forward" if mode == Mode.CHANNEL_FIRST else "forward"
    if phase in (Phase.LOSS, Phase.GRADIENT):
        return ("zf_" if mode == Mode.ZERO_FREE else "") + phase.name.lower()
    return {Phase.FC_BACKWARD: "fc", Phase.POOL_FORWARD: "pool_forward",
            Phase.POOL_BACKWARD: "pool_backward"}[phase]


# --- the walker's registers ---------------------------------------------------------------

#: The walker's own 48-bit registers (``nb``, ``np``, ``t``, ``u``, ``rowlen`` shadow the plan's).
_UNIT_REGS = ("nb", "np", "t", "u", "rowlen", "len_a", "len_b", "len_x", "yoff", "blen",
              "dyoff", "eohow", "kend", "zstride", "xstep", "dstep", "zdhq", "zdhr", "zdwq",
              "zdwr", "zpwq", "zpwr", "zptq", "zptr", "zkv", "zgrp", "wcb", "zlen", "cend",
              "cbstep")
#: Its row-band registers (``dim_width + 2`` bits).
_DIM_REGS = ("obh", "y0", "yend", "eh", "eoh", "pt", "pb", "lo", "hi", "pq", "pr")


class _Regs(dict):
    """Registers of fixed widths (a write keeps the low bits, as hardware does); a name that
    is not one of them reads ``fallback`` (the plan's registers)."""

    def __init__(self, widths, fallback=None):
        super().__init__({name: 0 for name in widths})
        self.widths, self.fallback = widths, fallback or {}

    def __setitem__(self, name, value):
        super().__setitem__(name, value & ((1 << self.widths[name]) - 1))

    def __missing__(self, name):
        return self.fallback[name]

    def set(self, **values):
        """Parallel assignments (every right-hand side computed before the call)."""
        for name, value in values.items():
            self[name] = value


def dy_piece(words, i, pieces):
    """Words ``[lo, hi)`` of piece ``i`` of ``pieces`` of a ``words``-word tile (the zero-free
    gradient's next dY block, loaded a piece after each run of the step's input blocks)."""
    return words * i // pieces, words * (i + 1) // pieces


def _mn(*vals):
    out = vals[0]
    for v in vals[1:]:
        out = v if v < out else out
    return out


class _Walk:
    """One layer's walk; ``self.events`` is its stream."""

    def __init__(self, config, desc, plan, xbank):
        self.cfg, self.d, self.plan = config, desc, plan
        dim = config.dim_width
        paw = config.buf_p_depth.bit_length() - 1
        self.r = _Regs({**{n: _W for n in _UNIT_REGS}, **{n: dim + 2 for n in _DIM_REGS}},
                       plan)
        self.ptr = _Regs({n: _PTR for n in ("xn", "xg", "x", "w", "wk", "wg", "dy", "dyn",
                                            "out", "outn", "outg", "dwg")})
        self.loop = _Regs({n: _W for n in ("n", "c0", "k0", "kti", "o0", "kb0")})
        self.g = _Regs({"grp_c": _W, "grp_k": _W, "grp_n": _W, "p_row": _W,
                        "row_base": dim + 1, "kt_rows": _W, "fc_o0": _W,
                        "fc_dw_p0": paw + 1, "clear_dw": 1, "xbank": 1, "x_off": _W,
                        "w_off": _W})
        self.g["xbank"] = xbank
        self.obs = element_bytes(config.operand_width).bit_length() - 1
        self.abs_ = element_bytes(config.result_width).bit_length() - 1
        self.oes = (element_bytes(config.operand_width) if desc["requant"]
                    else element_bytes(config.result_width)).bit_length() - 1
        self.key = program_key(desc)
        self.events = []
        self.runs = 0                     # runs started without HOLD: the scheduler's bank is
                                          # their parity

    # --- the shared multiplier / divider --------------------------------------------------
    def mul(self, a, b):
        a, b = a & _MASK, b & _MASK
        if a * b > _MASK:
            raise Refusal(AccelError.TOO_LARGE, ("mul", a, b),
                          f"the walker's arithmetic overflows {_W} bits ({a} * {b})")
        return a * b

    def div(self, a, b):
        a, b = a & _MASK, b & _MASK
        if b == 0:
            raise Refusal(AccelError.TOO_LARGE, ("div", a, b),
                          f"the walker's arithmetic divides by zero ({a} // {b})")
        return a // b

    # --- helpers (the walker's _helpers) ---------------------------------------------------
    def band(self, steps, row_words=None):
        """Run a band program of :mod:`bpsa.plan.bands` on the band registers; ``row_words``:
        the buffer words of an input row (default ``W``)."""
        d, r = self.d, self.r
        env = {"o0": self.loop["o0"], "obh": r["obh"], "h": d["h"],
               "w": d["w"] if row_words is None else row_words,
               "stride_h": d["stride_h"], "pad_h": d["pad_h"], "drh": r["drh"],
               "oh": r["oh"], "ow": r["ow"],
               **{name: r[name] for name in band_programs.BAND_REGISTERS}}
        evaluate(steps, env, band_programs.register_widths(self.cfg.dim_width),
                 unit_width=_W, overflow_code=AccelError.TOO_LARGE)
        for name in band_programs.BAND_REGISTERS:
            r[name] = env[name]

    def out_band(self, row_words=None, plane_words=None):
        """Band of output rows [o0, o0 + obh) (forward, gradient); ``row_words`` /
        ``plane_words``: the buffer words of an input row / plane (default ``W`` / ``H W``)."""
        r, d = self.r, self.d
        r["obh"] = _mn(r["bh"], r["oh"] - self.loop["o0"])
        if r["banded"]:
            self.band(band_programs.output_band(), row_words)
        else:
            r.set(y0=0, eh=d["h"], pt=d["pad_h"], pb=d["pad_h"], yoff=0,
                  blen=r["hw"] if plane_words is None else plane_words)

    def load(self, target, cache, addr, length, lanes, runs=None, offset=0, run_words=None,
             bank=None):
        count, run_len, stride = runs if runs is not None else (1, length, 0)
        if run_words is None:
            run_words = run_len
        self.events.append(Load(
            target=TARGET[target], cache=CACHE[cache],
            bank=self.runs & 1 if bank is None else bank, offset=offset & _MASK,
            addr=addr & ((1 << _PTR) - 1), length=length & _MASK, lanes=lanes,
            count=count & _MASK, run_len=run_len & _MASK, run_words=run_words & _MASK,
            stride=stride & _MASK))

    def run(self, hold=False):
        """``*_RUN_WAIT``: the scheduler starts the run; ``hold``: it reads the half of buffer
        B the run before it read (and does not toggle the scheduler's bank)."""
        r, g = self.r, self.g
        values = {"batch": g["grp_n"], "channels": g["grp_c"], "out_channels": g["grp_k"],
                  "height": r["eh"], "out_height": r["eoh"], "pad_top": r["pt"],
                  "pad_bottom": r["pb"],
                  "pt_q": r["zptq"], "pt_r": r["zptr"], "pw_q": r["zpwq"], "pw_r": r["zpwr"],
                  "dh_q": r["zdhq"], "dh_r": r["zdhr"], "dw_q": r["zdwq"], "dw_r": r["zdwr"],
                  "kblocks": r["zgrp"], "kvalid": r["zkv"], "plane": r["eohow"],
                  "y0": self.loop["o0"], "rows": r["obh"], "xlo": r["y0"], "dlo": r["lo"],
                  "drows": r["eoh"], "q0": r["pq"], "rem0": r["pr"], "x_plane": r["u"],
                  "d_plane": r["eohow"], "d_offset": r["dyoff"],
                  "p_row": g["p_row"], "row_base": g["row_base"], "kt_rows": g["kt_rows"],
                  "fc_o0": g["fc_o0"], "fc_dw_p0": g["fc_dw_p0"], "clear_words": r["np"],
                  "xbank": g["xbank"], "x_off": g["x_off"], "w_off": g["w_off"]}
        self.events.append(Run(**{f: values[f] for f in RUN_FIELDS[self.key]}, hold=hold))
        if not hold:
            self.runs += 1

    def step(self):
        self.events.append(Step())

    def save(self, rows, length, nb, stride, addr, final):
        self.events.append(Save(rows=rows & _MASK, length=length & _MASK, nb=nb & _MASK,
                                stride=stride & _MASK, addr=addr & ((1 << _PTR) - 1),
                                final=final))

    def last(self):
        self.events.append(Last())

    # --- the phases ------------------------------------------------------------------------
    def forward(self, cf=False):
        r, ptr, loop, d, g, mul = self.r, self.ptr, self.loop, self.d, self.g, self.mul
        obs, oes, C, B = self.obs, self.oes, self.cfg.cols, self.cfg.feeder_bus_width
        zn = self.plan["zn"] if cf else 1   # channel-first: images a step, stacked into
        stacked = bool(self.plan.get("zs"))  # one run (zs) or a run each with W held
        mx = cf and self.cfg.is_mx          # MX: X's scale codes after its codes, a block's W
        if mx:                              # scale words after its W words (mx_layout)
            xs_base = d["addr_x"] + (mul(d["n"], r["cimg"]) << obs)
        loop["n"] = 0
        ptr.set(xn=d["addr_x"], outg=d["addr_out"])
        while True:                                   # images [n, n + zng)
            zng = _mn(zn, d["n"] - loop["n"])
            loop["kb0"] = 0
            while True:                               # output-channel blocks [kb0, kend)
                r["kend"] = _mn(loop["kb0"] + r["kb"], r["kt"])
                loop["o0"] = 0
                r["zstride"] = mul(r["crs"] + (mul(r["ct"], r["rs"]) if mx else 0), C)
                r["t"] = mul(loop["kb0"], r["zstride"])
                r["dstep"] = mul(r["ohow"], C)
                r["xstep"] = mul(r["dstep"], r["kend"] - loop["kb0"])
                ptr["wk"] = d["addr_w"] + (r["t"] << obs)
                if cf:                  # Y blocked K-major: [k block][image][OH OW][cols]
                    r["t"] = mul(mul(loop["kb0"], d["n"]) + loop["n"], r["dstep"])
                    ptr["out"] = d["addr_out"] + (r["t"] << oes)
                else:
                    ptr["out"] = ptr["outg"]
                while True:                           # band o0: a step
                    self.out_band()
                    if cf:
                        r["u"] = mul(r["yoff"], r["cl"])
                    held = zng > 1 and not stacked    # a run an image, W held
                    if zng > 1 and stacked:           # the images as one of zn H rows
                        r.set(eh=mul(zng, d["h"]), obh=mul(zng, r["oh"]),
                              blen=mul(zng, r["hw"]))
                    r["t"] = mul(r["obh"], r["ow"])
                    g["p_row"] = r["t"]               # a run's Y: P words a block
                    if held:                          # the images' Y of a block side by side
                        r["t"] = mul(r["t"], zng)
                    r["rowlen"] = mul(r["t"], C)
                    r["np"] = mul(r["t"], r["kend"] - loop["kb0"])
                    loop["c0"] = 0
                    ptr.set(x=ptr["xn"] + ((r["u"] if cf else r["yoff"]) << obs),
                            wg=ptr["wk"])
                    self.step()
                    while True:                       # input channels [c0, c0 + cg)
                        g.set(grp_c=_mn(r["cg"], d["c"] - loop["c0"]), xbank=~g["xbank"])
                        loop.set(kti=loop["kb0"], k0=loop["kb0"] * C)
                        ptr["w"] = ptr["wg"]
                        r["len_a"] = mul(r["blen"], r["cl"] if cf else g["grp_c"])
                        r["t"] = mul(r["rs"], g["grp_c"] + 1 if mx else g["grp_c"])
                        r["len_b"] = mul(r["t"], C)
                        if cf and zng > 1:            # a DMA run an image, side by side
                            self.load("CF_X", "CF", ptr["x"], mul(zng, r["cpl"]), r["cl"],
                                      runs=(zng, r["cpl"], r["cimg"] << obs),
                                      run_words=r["hw"], bank=g["xbank"])
                        elif cf:
                            self.load("CF_X", "CF", ptr["x"], r["len_a"], r["cl"],
                                      bank=g["xbank"])
                        else:
                            self.load("FWD_X", "A", ptr["x"], r["len_a"], B, bank=g["xbank"])
                        if mx:                        # the scale codes: a byte a pixel
                            xs = xs_base + self.div(ptr["x"] - d["addr_x"], r["cl"])
                            if zng > 1:
                                self.load("CF_XS", "CF_XS", xs, mul(zng, r["hw"]), 1,
                                          runs=(zng, r["hw"], self.div(r["cimg"], r["cl"])),
                                          run_words=r["hw"], bank=g["xbank"])
                            else:
                                self.load("CF_XS", "CF_XS", xs,
                                          self.div(r["len_a"], r["cl"]), 1, bank=g["xbank"])
                        while True:                   # output-channel block kti
                            g["grp_k"] = _mn(C, d["k"] - loop["k0"])
                            self.load("FWD_W", "B", ptr["w"], r["len_b"], C)
                            for i in range(zng if held else 1):   # the images, W held
                                g.set(row_base=(loop["kti"] - loop["kb0"]) * (zng if held
                                                                              else 1) + i,
                                      x_off=mul(i, r["hw"]))
                                self.run(hold=i > 0)
                            ptr["w"] = ptr["w"] + (r["zstride"] << obs)
                            if loop["kti"] + 1 < r["kend"]:
                                loop.set(kti=loop["kti"] + 1, k0=loop["k0"] + C)
                                continue
                            break
                        if loop["c0"] + g["grp_c"] < d["c"]:
                            x_step = r["cpl"] if cf else (r["hw"] if r["banded"]
                                                          else r["len_a"])
                            loop["c0"] = loop["c0"] + g["grp_c"]
                            ptr.set(x=ptr["x"] + (x_step << obs),
                                    wg=ptr["wg"] + (r["len_b"] << obs))
                            continue
                        break
                    final = (loop["o0"] + r["obh"] >= r["oh"] and r["kend"] >= r["kt"]
                             and loop["n"] + zng >= d["n"])
                    self.save(r["kend"] - loop["kb0"], r["rowlen"],
                              mul(g["p_row"], zng) if held else g["p_row"],
                              (mul(r["dstep"], d["n"]) if cf else r["dstep"]) << oes,
                              ptr["out"], final)
                    ptr["out"] = ptr["out"] + (r["rowlen"] << oes)
                    if loop["o0"] + r["obh"] < r["oh"]:
                        loop["o0"] = loop["o0"] + r["obh"]
                        continue
                    break
                ptr["outg"] = ptr["outg"] + (r["xstep"] << oes)
                if r["kend"] < r["kt"]:
                    loop["kb0"] = r["kend"]
                    continue
                break
            if loop["n"] + zng < d["n"]:
                loop["n"] = loop["n"] + zng
                ptr["xn"] = ptr["xn"] + (mul(zng, r["cimg" if cf else "chw"]) << obs)
                continue
            break
        self.last()

    def loss(self):
        r, ptr, loop, d, g, mul, div = (self.r, self.ptr, self.loop, self.d, self.g, self.mul,
                                        self.div)
        obs, abs_, C, R = self.obs, self.abs_, self.cfg.cols, self.cfg.rows
        plan = self.plan
        r.set(nb=plan["nb"], np=plan["np"])
        loop["n"] = 0
        ptr.set(dyn=d["addr_dy"], outn=d["addr_out"])
        g["row_base"] = 0
        while True:                                   # image n
            loop["o0"] = 0
            while True:                               # band of dX rows [o0, o0 + obh)
                r["obh"] = _mn(r["bh"], d["h"] - loop["o0"])
                loop["c0"] = 0
                if r["banded"]:
                    self.band(band_programs.loss_band())
                    r["nb"] = div(r["blen"] + (C - 1), C)
                    r["np"] = mul(r["cg"], r["nb"])
                else:
                    r.set(eh=d["h"], eoh=r["oh"], pt=d["pad_h"], pb=d["pad_h"], dyoff=0,
                          yoff=0, blen=r["hw"], eohow=r["ohow"])
                while True:                           # step: dX channel block c0
                    g["grp_c"] = _mn(r["cg"], d["c"] - loop["c0"])
                    r["t"] = mul(loop["c0"], r["hw"])
                    r["u"] = mul(loop["c0"], r["rs"])
                    loop["k0"] = 0
                    ptr.set(w=d["addr_w"] + (r["u"] << obs),
                            out=ptr["outn"] + ((r["t"] + r["yoff"]) << abs_))
                    g["p_row"] = r["nb"]
                    self.step()
                    while True:                       # group of output channels k0
                        g["grp_k"] = _mn(r["kg"], d["k"] - loop["k0"])
                        r["u"] = mul(r["rs"], g["grp_c"])
                        r["len_a"] = mul(r["u"], g["grp_k"])
                        r["len_x"] = mul(r["crs"], g["grp_k"])
                        r["len_b"] = mul(r["eohow"], g["grp_k"])
                        r["t"] = mul(r["rs"], g["grp_k"])
                        g["kt_rows"] = div(r["t"] + (R - 1), R)
                        r["t"] = mul(r["ohow"], loop["k0"])
                        ptr["dy"] = ptr["dyn"] + ((r["t"] + r["dyoff"]) << obs)
                        all_c = g["grp_c"] == d["c"]
                        self.load("BWD_A", "A", ptr["w"], r["len_a"], 1,
                                  runs=(1 if all_c else g["grp_k"],
                                        r["len_a"] if all_c else r["u"], r["crs"] << obs))
                        banded = r["banded"]
                        self.load("BWD_B", "B", ptr["dy"], r["len_b"], 1,
                                  runs=(g["grp_k"] if banded else 1,
                                        r["eohow"] if banded else r["len_b"],
                                        r["ohow"] << obs))
                        self.run()
                        k_next = loop["k0"] + g["grp_k"]
                        loop["k0"] = k_next
                        ptr["w"] = ptr["w"] + (r["len_x"] << obs)
                        if k_next < d["k"]:
                            continue
                        break
                    final = (loop["c0"] + g["grp_c"] >= d["c"]
                             and loop["o0"] + r["obh"] >= d["h"] and loop["n"] + 1 >= d["n"])
                    self.save(g["grp_c"], r["blen"], r["nb"], r["hw"] << abs_, ptr["out"],
                              final)
                    if loop["c0"] + g["grp_c"] < d["c"]:
                        loop["c0"] = loop["c0"] + g["grp_c"]
                        continue
                    break
                if loop["o0"] + r["obh"] < d["h"]:
                    loop["o0"] = loop["o0"] + r["obh"]
                    continue
                break
            if loop["n"] + 1 < d["n"]:
                loop["n"] = loop["n"] + 1
                ptr.set(dyn=ptr["dyn"] + (r["kohow"] << obs),
                        outn=ptr["outn"] + (r["chw"] << abs_))
                continue
            break
        self.last()

    def gradient(self):
        r, ptr, loop, d, g, mul, div = (self.r, self.ptr, self.loop, self.d, self.g, self.mul,
                                        self.div)
        obs, abs_, C, R = self.obs, self.abs_, self.cfg.cols, self.cfg.rows
        loop["kb0"] = 0
        while True:                                   # output channels [kb0, kend)
            r["kend"] = _mn(loop["kb0"] + r["kb"], d["k"])
            loop["c0"] = 0
            ptr["xg"] = d["addr_x"]
            r["t"] = mul(loop["kb0"], r["crs"])
            ptr["outg"] = d["addr_out"] + (r["t"] << abs_)
            while True:                               # step: channel group c0
                g["grp_c"] = _mn(r["cg"], d["c"] - loop["c0"])
                r["rowlen"] = mul(r["rs"], g["grp_c"])
                r["nb"] = div(r["rowlen"] + (C - 1), C)
                r["np"] = mul(r["kend"] - loop["kb0"], r["nb"])
                r["len_x"] = mul(r["hw"], g["grp_c"])
                g["p_row"] = r["nb"]
                loop["n"] = 0
                ptr.set(dyn=d["addr_dy"], xn=ptr["xg"])
                self.step()
                while True:                           # image n
                    loop["o0"] = 0
                    while True:                       # band of dY rows [o0, o0 + obh)
                        self.out_band()
                        r["t"] = mul(r["obh"] - 1, d["stride_h"])
                        r["t"] = mul(r["wdp1"], r["t"] + 1)
                        g["kt_rows"] = div(r["t"] + (R - 1), R)
                        r["eohow"] = mul(r["obh"], r["ow"])
                        r["dyoff"] = mul(loop["o0"], r["ow"])
                        r["len_b"] = mul(r["blen"], g["grp_c"])
                        r["eoh"] = r["obh"]
                        loop["k0"] = loop["kb0"]
                        ptr["x"] = ptr["xn"] + (r["yoff"] << obs)
                        while True:                   # output-channel group k0
                            g.set(grp_k=_mn(r["kg"], r["kend"] - loop["k0"]),
                                  row_base=loop["k0"] - loop["kb0"])
                            r["len_a"] = mul(r["eohow"], g["grp_k"])
                            r["t"] = mul(r["ohow"], loop["k0"])
                            ptr["dy"] = ptr["dyn"] + ((r["t"] + r["dyoff"]) << obs)
                            banded = r["banded"]
                            self.load("BWD_A", "A", ptr["dy"], r["len_a"], 1,
                                      runs=(g["grp_k"] if banded else 1,
                                            r["eohow"] if banded else r["len_a"],
                                            r["ohow"] << obs))
                            self.load("BWD_B", "B", ptr["x"], r["len_b"], 1,
                                      runs=(g["grp_c"] if banded else 1,
                                            r["blen"] if banded else r["len_b"],
                                            r["hw"] << obs))
                            self.run()
                            if loop["k0"] + g["grp_k"] < r["kend"]:
                                loop["k0"] = loop["k0"] + g["grp_k"]
                                continue
                            break
                        if loop["o0"] + r["obh"] < r["oh"]:
                            loop["o0"] = loop["o0"] + r["obh"]
                            continue
                        break
                    if loop["n"] + 1 < d["n"]:
                        loop["n"] = loop["n"] + 1
                        ptr.set(dyn=ptr["dyn"] + (r["kohow"] << obs),
                                xn=ptr["xn"] + (r["chw"] << obs))
                        continue
                    break
                final = loop["c0"] + g["grp_c"] >= d["c"] and r["kend"] >= d["k"]
                self.save(r["kend"] - loop["kb0"], r["rowlen"], r["nb"], r["crs"] << abs_,
                          ptr["outg"], final)
                if loop["c0"] + g["grp_c"] < d["c"]:
                    loop["c0"] = loop["c0"] + g["grp_c"]
                    ptr.set(xg=ptr["xg"] + (r["len_x"] << obs),
                            outg=ptr["outg"] + (r["rowlen"] << abs_))
                    continue
                break
            if r["kend"] < d["k"]:
                loop["kb0"] = r["kend"]
                continue
            break
        self.last()

    def zf_gradient(self):
        r, ptr, loop, d, g, mul = self.r, self.ptr, self.loop, self.d, self.g, self.mul
        obs, abs_, C, B = self.obs, self.abs_, self.cfg.cols, self.cfg.feeder_bus_width
        r["nb"] = self.plan["nb"]
        cn, zn = self.plan["cn"], self.plan["zn"]
        # buffer words of an X row / a dY row (MX: the pixels', then the scale words)
        px, pd = r["px"], r["pd"]
        stacked = mul(mul(r["oh"], d["stride_h"]), px)  # buffer words an image's X takes
        loop["kb0"] = 0
        while True:                                   # output-channel blocks [kb0, kend)
            r["kend"] = _mn(loop["kb0"] + r["kb"], r["kt"])
            loop["c0"] = 0
            r["t"] = mul(loop["kb0"], r["crs"])
            r["t"] = mul(r["t"], C)
            r["zstride"] = mul(r["crs"], C)
            r["xstep"] = mul(r["xwords"], B)
            r["dstep"] = mul(r["dwords"], C)
            ptr["outg"] = d["addr_out"] + (r["t"] << abs_)
            while True:                               # step: input-channel blocks from c0
                r["cend"] = _mn(loop["c0"] + mul(cn, B), d["c"])
                blocks = -(-(r["cend"] - loop["c0"]) // B)
                loop["n"] = 0
                ptr["dyn"] = d["addr_dy"]
                r["np"] = mul(mul(r["kend"] - loop["kb0"], blocks), r["nb"])
                r["rowlen"] = mul(r["rs"], r["cend"] - loop["c0"])
                r["rowlen"] = mul(r["rowlen"], C)
                r["t"] = mul(loop["c0"], r["rs"])
                r["t"] = mul(r["t"], C)
                r["u"] = mul(loop["c0"], r["xhw"])
                ptr.set(out=ptr["outg"] + (r["t"] << abs_), xn=d["addr_x"] + (r["u"] << obs))
                g["p_row"] = r["nb"]
                self.step()
                while True:                           # images [n, n + zng): a run's
                    zng = _mn(zn, d["n"] - loop["n"])
                    loop["o0"] = 0
                    while True:                       # band of dY rows [o0, o0 + obh)
                        self.out_band(px, r["xhw"])
                        g["xbank"] = ~g["xbank"]
                        r["t"] = mul(r["yoff"], B)
                        r["len_a"] = mul(r["blen"], B)
                        r["eohow"] = mul(r["obh"], pd)
                        r["len_b"] = mul(r["eohow"], C)
                        r["dyoff"] = mul(loop["o0"], pd)
                        r["dyoff"] = mul(r["dyoff"], C)
                        r["eoh"] = r["obh"]
                        if zng > 1:                   # the images stacked OH s rows apart
                            r.set(eh=mul(zng, stacked // px), eoh=mul(zng, r["obh"]))
                        loop["k0"] = loop["kb0"]
                        ptr["x"] = ptr["xn"] + (r["t"] << obs)
                        span = r["blen"] if zng == 1 else mul(zng, stacked)  # a block's words
                        # the step's blocks of the band, block after block in the X bank
                        # (in pieces under the runs before: spread_loads)
                        self.x_blocks(ptr["x"], blocks, zng, span, stacked)
                        # with several input blocks, the next output block's dY comes in
                        # pieces, one after each run of this block's (so the loads overlap
                        # all of them, into the bank the next block's runs read)
                        spread = blocks > 1
                        while True:                   # output-channel block k0
                            r["t"] = mul(loop["k0"], r["dohow"])
                            r["t"] = mul(r["t"], C)
                            ptr["dy"] = ptr["dyn"] + ((r["t"] + r["dyoff"]) << obs)
                            if not spread or loop["k0"] == loop["kb0"]:
                                self.dy_words(ptr["dy"], 0, r["eohow"], zng)
                            r["t"] = mul(loop["k0"] + 1, r["dohow"])
                            r["t"] = mul(r["t"], C)
                            ptr["w"] = ptr["dyn"] + ((r["t"] + r["dyoff"]) << obs)
                            for i in range(blocks):   # the step's input blocks: one dY
                                g.set(grp_c=_mn(B, d["c"] - loop["c0"] - i * B),
                                      row_base=(loop["k0"] - loop["kb0"]) * blocks + i,
                                      x_off=mul(i, span))
                                self.run(hold=i > 0)
                                lo, hi = dy_piece(r["eohow"], i, blocks)
                                if spread and loop["k0"] + 1 < r["kend"] and hi > lo:
                                    self.dy_words(ptr["w"], lo, hi, zng)
                            if loop["k0"] + 1 < r["kend"]:
                                loop["k0"] = loop["k0"] + 1
                                continue
                            break
                        if loop["o0"] + r["obh"] < r["oh"]:
                            loop["o0"] = loop["o0"] + r["obh"]
                            continue
                        break
                    if loop["n"] + zng < d["n"]:
                        loop["n"] = loop["n"] + zng
                        ptr.set(xn=ptr["xn"] + (mul(zng, r["xstep"]) << obs),
                                dyn=ptr["dyn"] + (mul(zng, r["dstep"]) << obs))
                        continue
                    break
                final = r["cend"] >= d["c"] and r["kend"] >= r["kt"]
                self.save(r["kend"] - loop["kb0"], r["rowlen"], mul(blocks, r["nb"]),
                          r["zstride"] << abs_, ptr["out"], final)
                if r["cend"] < d["c"]:
                    loop["c0"] = r["cend"]
                    continue
                break
            if r["kend"] < r["kt"]:
                loop["kb0"] = r["kend"]
                continue
            break
        self.last()

    def x_blocks(self, addr, blocks, images, span, stacked):
        """The zero-free gradient's X of a step's ``blocks`` input blocks for a band, block
        after block in the X bank ``span`` words apart: one load (one image), or a load a
        block of ``images`` planes ``stacked`` words apart."""
        r, mul, obs, B = self.r, self.mul, self.obs, self.cfg.feeder_bus_width
        if images == 1:
            self.load("FWD_X", "A", addr, mul(r["len_a"], blocks), B,
                      runs=(blocks, r["len_a"], mul(r["xhw"], B) << obs),
                      run_words=r["blen"], bank=self.g["xbank"])
            return
        for b in range(blocks):
            self.load("FWD_X", "A", addr + (mul(mul(b, r["xhw"]), B) << obs),
                      mul(images, r["len_a"]), B,
                      runs=(images, r["len_a"], r["xstep"] << obs), run_words=stacked,
                      offset=mul(b, span), bank=self.g["xbank"])

    def dy_words(self, addr, lo, hi, images):
        """Words ``[lo, hi)`` of each of ``images`` dY planes of an output block (one run a
        plane, ``ohow`` words apart in buffer B) from ``addr`` (the first plane's word 0)."""
        r, mul, obs, C = self.r, self.mul, self.obs, self.cfg.cols
        self.load("FWD_W", "B", addr + (mul(lo, C) << obs), mul(mul(hi - lo, C), images), C,
                  runs=(images, mul(hi - lo, C), r["dstep"] << obs), run_words=r["dohow"],
                  offset=lo)

    def zf_loss(self):
        r, ptr, loop, d, g, mul, div = (self.r, self.ptr, self.loop, self.d, self.g, self.mul,
                                        self.div)
        obs, oes, C = self.obs, self.oes, self.cfg.cols
        # the walker keeps the run's input block in kb0 and the step's first image in kti
        r["nb"] = self.plan["nb"]
        loop["c0"] = 0
        r["zdhq"] = div(d["dil_h"], d["stride_h"])
        r["zdwq"] = div(d["dil_w"], d["stride_w"])
        r["zpwq"] = div(d["pad_w"], d["stride_w"])
        r["t"] = mul(r["zdhq"], d["stride_h"])
        r["u"] = mul(r["zdwq"], d["stride_w"])
        r.set(zdhr=d["dil_h"] - r["t"], zdwr=d["dil_w"] - r["u"])
        r["t"] = mul(r["zpwq"], d["stride_w"])
        r["zpwr"] = d["pad_w"] - r["t"]
        r["t"] = mul(r["kt"], r["ohow"])
        r["dstep"] = mul(r["t"], C)
        r["t"] = mul(r["ct"], r["hw"])
        r["xstep"] = mul(r["t"], C)
        r["zstride"] = mul(d["k"], r["nb"])
        r["cbstep"] = mul(r["hw"], C)
        bcap = self.cfg.buf_b_depth // 2
        held, fresh = None, False                     # the W slice the runs read (c0, k0)
        while True:                                   # input blocks [c0, cend)
            r["u"] = mul(loop["c0"], r["zstride"])
            r["wcb"] = d["addr_w"] + (r["u"] << obs)
            loop["o0"] = 0
            r["cend"] = _mn(loop["c0"] + r["cn"], r["ct"])
            while True:                               # band of dX rows [o0, o0 + obh)
                r["obh"] = _mn(r["bh"], d["h"] - loop["o0"])
                loop["kti"] = 0
                if r["banded"]:
                    self.band(band_programs.loss_band())
                else:
                    r.set(eh=d["h"], eoh=r["oh"], pt=d["pad_h"], pb=d["pad_h"], dyoff=0,
                          yoff=0, blen=r["hw"], eohow=r["ohow"])
                r["zptq"] = div(r["pt"], d["stride_h"])
                r["t"] = mul(r["zptq"], d["stride_h"])
                r["zptr"] = r["pt"] - r["t"]
                g["p_row"] = r["blen"]
                r["rowlen"] = mul(r["blen"], C)
                while True:                           # step: images [n0, n0 + zng)
                    n0 = loop["kti"]
                    g["grp_n"] = _mn(r["zn"], d["n"] - n0)
                    zng = g["grp_n"]
                    loop["k0"] = 0
                    r["np"] = mul(zng, r["blen"])
                    r["np"] = mul(r["np"], r["cend"] - loop["c0"])
                    r["t"] = mul(n0, r["ct"])
                    r["t"] = mul(r["t"] + loop["c0"], r["hw"])
                    r["t"] = mul(r["t"] + r["yoff"], C)
                    ptr["out"] = d["addr_out"] + (r["t"] << oes)
                    self.step()
                    while True:                       # blocks [k0, k0 + zgrp) of outputs
                        r["zgrp"] = _mn(r["kg"], r["kt"] - loop["k0"])
                        loop["n"] = n0
                        r["t"] = mul(loop["k0"] + r["zgrp"], C)
                        r["kend"] = _mn(r["t"], d["k"])
                        r["zkv"] = r["kend"] - (r["t"] - C)
                        r["u"] = mul(loop["k0"], C)
                        r["len_b"] = mul(r["kend"] - r["u"], r["nb"])
                        r["u"] = mul(r["u"], r["nb"])
                        r["len_a"] = mul(r["eohow"], C)
                        r["len_x"] = mul(r["ohow"], C)
                        r["zlen"] = mul(r["len_a"], r["zgrp"])
                        ptr["wg"] = r["wcb"] + (r["u"] << obs)
                        while True:                   # image n of the step
                            r["t"] = mul(loop["k0"], r["ohow"])
                            r["t"] = mul(r["t"] + r["dyoff"], C)
                            r["u"] = mul(loop["n"], r["dstep"])
                            ptr.set(dy=d["addr_dy"] + ((r["u"] + r["t"]) << obs),
                                    w=ptr["wg"])
                            loop["kb0"] = loop["c0"]
                            g["xbank"] = ~g["xbank"]
                            self.load("FWD_X", "A", ptr["dy"], r["zlen"], C,
                                      runs=(r["zgrp"], r["len_a"], r["len_x"] << obs),
                                      run_words=r["eohow"], bank=g["xbank"])
                            # W of the step's blocks stays in one half of B (the runs HOLD
                            # it) when it fits: of every output channel (loaded once a step),
                            # or of this group's; else a block's W a run
                            wwords = div(r["len_b"], C)
                            kwords = div(r["zstride"], C)         # a block's W, every output
                            blocks = r["cend"] - loop["c0"]
                            whole = mul(blocks, kwords) <= bcap
                            resident = whole or mul(blocks, wwords) <= bcap
                            want = (loop["c0"],) if whole else (loop["c0"], loop["k0"])
                            if resident and held != want:
                                if whole:
                                    self.load("FWD_W", "B", r["wcb"], mul(blocks, r["zstride"]),
                                              C)
                                else:
                                    self.load("FWD_W", "B", ptr["wg"], mul(blocks, r["len_b"]),
                                              C, runs=(blocks, r["len_b"],
                                                       r["zstride"] << obs), run_words=wwords)
                                held, fresh = want, True
                            while True:               # input block cb: a run
                                cb = loop["kb0"]
                                g["row_base"] = cb - loop["c0"] + loop["n"] - n0
                                if resident:
                                    g["w_off"] = (mul(cb - loop["c0"], kwords)
                                                  + mul(mul(loop["k0"], C), r["rs"]) if whole
                                                  else mul(cb - loop["c0"], wwords))
                                    self.run(hold=not fresh)
                                    fresh = False
                                else:
                                    g["w_off"] = 0
                                    self.load("FWD_W", "B", ptr["w"], r["len_b"], C)
                                    self.run()
                                    held = None
                                ptr["w"] = ptr["w"] + (r["zstride"] << obs)
                                if cb + 1 < r["cend"]:
                                    loop["kb0"] = cb + 1
                                    continue
                                break
                            if loop["n"] + 1 < n0 + zng:
                                loop["n"] = loop["n"] + 1
                                continue
                            break
                        if loop["k0"] + r["zgrp"] < r["kt"]:
                            loop["k0"] = loop["k0"] + r["zgrp"]
                            continue
                        break
                    final = (n0 + zng >= d["n"] and loop["o0"] + r["obh"] >= d["h"]
                             and r["cend"] >= r["ct"])
                    self.save(zng * (r["cend"] - loop["c0"]), r["rowlen"], r["blen"],
                              (r["xstep"] if zng > 1 else r["cbstep"]) << oes, ptr["out"],
                              final)
                    if n0 + zng < d["n"]:
                        loop["kti"] = n0 + zng
                        continue
                    break
                if loop["o0"] + r["obh"] < d["h"]:
                    loop["o0"] = loop["o0"] + r["obh"]
                    continue
                break
            if r["cend"] < r["ct"]:
                loop["c0"] = r["cend"]
                continue
            break
        self.last()

    def fc(self):
        r, ptr, loop, d, g, mul, div = (self.r, self.ptr, self.loop, self.d, self.g, self.mul,
                                        self.div)
        obs, abs_, R = self.obs, self.abs_, self.cfg.rows
        loop["c0"] = 0
        ptr.set(outg=d["addr_out"], dwg=d["addr_out"] + (r["kohow"] << abs_))
        g.set(fc_dw_p0=r["fnb"], row_base=0, p_row=r["fq"])
        while True:                                   # input block c0
            g.set(grp_c=_mn(r["fib"], d["c"] - loop["c0"]), clear_dw=1)
            loop["n"] = 0
            ptr.set(dyn=d["addr_dy"], xn=d["addr_x"] + (loop["c0"] << obs),
                    outn=ptr["outg"])
            while True:                               # step: batch rows [n, n + grp_n)
                g["grp_n"] = _mn(r["fnb"], d["n"] - loop["n"])
                loop["k0"] = 0
                r["np"] = mul(r["fnb"] + (d["k"] if g["clear_dw"] else 0), r["fq"])
                g["clear_dw"] = 0
                ptr.set(dy=ptr["dyn"], w=d["addr_w"] + (loop["c0"] << obs))
                self.step()
                r["len_x"] = mul(g["grp_n"], g["grp_c"])
                r["u"] = mul(g["grp_n"], d["k"])
                r["rowlen"] = mul(g["grp_n"], d["c"])
                while True:                           # output block k0
                    g.set(grp_k=_mn(r["fob"], d["k"] - loop["k0"]), fc_o0=loop["k0"])
                    g["kt_rows"] = div(g["grp_k"] + (R - 1), R)
                    r["len_a"] = mul(g["grp_n"], g["grp_k"])
                    r["len_b"] = mul(g["grp_k"], g["grp_c"])
                    r["t"] = mul(g["grp_k"], d["c"])
                    all_k, all_c = g["grp_k"] == d["k"], g["grp_c"] == d["c"]
                    self.load("BWD_A", "A", ptr["dy"], r["len_a"], 1,
                              runs=(1 if all_k else g["grp_n"],
                                    r["len_a"] if all_k else g["grp_k"], d["k"] << obs))
                    self.load("BWD_B", "B", ptr["xn"], r["len_x"], 1,
                              runs=(1 if all_c else g["grp_n"],
                                    r["len_x"] if all_c else g["grp_c"], d["c"] << obs))
                    self.load("BWD_B", "W", ptr["w"], r["len_b"], 1,
                              runs=(1 if all_c else g["grp_k"],
                                    r["len_b"] if all_c else g["grp_c"], d["c"] << obs),
                              offset=r["fwoff"])
                    self.run()
                    k0 = loop["k0"]
                    loop["k0"] = k0 + g["grp_k"]
                    ptr.set(dy=ptr["dy"] + (g["grp_k"] << obs), w=ptr["w"] + (r["t"] << obs))
                    if k0 + g["grp_k"] < d["k"]:
                        continue
                    break
                last_chunk = loop["n"] + g["grp_n"] >= d["n"]
                final = last_chunk and loop["c0"] + g["grp_c"] >= d["c"]
                self.save(g["grp_n"], g["grp_c"], r["fq"], d["c"] << abs_, ptr["outn"], final)
                if not last_chunk:
                    loop["n"] = loop["n"] + g["grp_n"]
                    ptr.set(dyn=ptr["dyn"] + (r["u"] << obs),
                            xn=ptr["xn"] + (r["rowlen"] << obs),
                            outn=ptr["outn"] + (r["rowlen"] << abs_))
                    continue
                break
            self.events.append(Save2(rows=d["k"] & _MASK, p0=r["fdw0"] & _MASK,
                                     addr=ptr["dwg"]))
            ptr.set(dwg=ptr["dwg"] + (g["grp_c"] << abs_),
                    outg=ptr["outg"] + (g["grp_c"] << abs_))
            if loop["c0"] + g["grp_c"] < d["c"]:
                loop["c0"] = loop["c0"] + g["grp_c"]
                continue
            break
        self.last()

    def pool(self):
        r, ptr, loop, d, g, mul, div = (self.r, self.ptr, self.loop, self.d, self.g, self.mul,
                                        self.div)
        obs, oes, C = self.obs, self.oes, self.cfg.cols
        NL = self.cfg.pool_lanes        # planes a buffer word (channel-blocked in memory)
        epw = C // NL                   # a plane's elements a P word
        bwd = d["phase"] == Phase.POOL_BACKWARD
        xskip = bwd and d["pool_kind"] == PoolKind.AVG and not d["relu"]
        out_rows = d["h"] if bwd else r["oh"]
        out_w = d["w"] if bwd else r["ow"]
        out_plane = r["hw"] if bwd else r["ohow"]
        loop["n"] = 0
        ptr.set(xn=d["addr_x"], dyn=d["addr_dy"], outn=d["addr_out"])
        g["row_base"] = 0
        while True:                                   # planes [n, n + pg)
            g["grp_c"] = _mn(r["pg"], r["planes"] - loop["n"])
            loop["o0"] = 0
            r["xstep"] = mul(mul(g["grp_c"], r["hw"]), NL)
            r["dstep"] = mul(mul(g["grp_c"], r["ohow"]), NL)
            r["zstride"] = mul(mul(g["grp_c"], out_plane), NL)
            while True:                               # rows [o0, o0 + obh): a run, a step
                r["obh"] = _mn(r["bh"], out_rows - loop["o0"])
                if bwd:
                    self.band(band_programs.pool_backward_band())
                else:
                    self.band(band_programs.output_band())
                    r.set(lo=0, eoh=0)
                r["len_x"] = mul(r["eh"], d["w"])
                r["u"] = 0 if xskip else r["len_x"]
                r["len_a"] = mul(g["grp_c"], r["u"])
                r["eohow"] = mul(r["eoh"], r["ow"])
                r["len_b"] = mul(g["grp_c"], r["eohow"])
                r["rowlen"] = mul(r["obh"], out_w)
                g["p_row"] = div(r["rowlen"] + (epw - 1), epw)
                r["np"] = mul(g["grp_c"], g["p_row"])
                r["t"] = mul(mul(r["y0"], d["w"]), NL)
                r["blen"] = mul(mul(r["lo"], r["ow"]), NL)
                r["yoff"] = mul(mul(loop["o0"], out_w), NL)
                r["dyoff"] = r["len_a"]
                self.step()
                ptr.set(x=ptr["xn"] + (r["t"] << obs), dy=ptr["dyn"] + (r["blen"] << obs),
                        out=ptr["outn"] + (r["yoff"] << oes))
                if not xskip:
                    self.load("POOL", "POOL_X", ptr["x"], mul(r["len_a"], NL), NL,
                              runs=(g["grp_c"], mul(r["len_x"], NL),
                                    mul(r["hw"], NL) << obs), run_words=r["len_x"])
                if bwd and r["eoh"] != 0:
                    self.load("POOL", "POOL_DY", ptr["dy"], mul(r["len_b"], NL), NL,
                              runs=(g["grp_c"], mul(r["eohow"], NL),
                                    mul(r["ohow"], NL) << obs),
                              run_words=r["eohow"], offset=r["dyoff"])
                self.run()
                more_rows = loop["o0"] + r["obh"] < out_rows
                final = not more_rows and loop["n"] + g["grp_c"] >= r["planes"]
                self.save(g["grp_c"], mul(r["rowlen"], NL), g["p_row"],
                          mul(out_plane, NL) << oes, ptr["out"], final)
                if more_rows:
                    loop["o0"] = loop["o0"] + r["obh"]
                    continue
                break
            if loop["n"] + g["grp_c"] < r["planes"]:
                loop["n"] = loop["n"] + g["grp_c"]
                ptr.set(xn=ptr["xn"] + (r["xstep"] << obs),
                        dyn=ptr["dyn"] + (r["dstep"] << obs),
                        outn=ptr["outn"] + (r["zstride"] << oes))
                continue
            break
        self.last()


def layer_program_state(config, desc, *, xbank=0):
    """``(events, xbank)``: :func:`layer_program`'s events, and the walker's X bank register
    at the layer's end (the next layer starts from it)."""
    plan = setup.run(config, desc)
    # the fields setup.run defaults (addresses, MODE, REQUANT, RELU, POOL_KIND)
    desc = {"addr_x": 0, "addr_w": 0, "addr_dy": 0, "addr_out": 0, "mode": 0, "requant": 0,
            "relu": 0, "pool_kind": 0, **desc}
    walk = _Walk(config, desc, plan, xbank)
    key = walk.key
    if key in ("forward", "cf_forward"):
        walk.forward(cf=key == "cf_forward")
    elif key in ("pool_forward", "pool_backward"):
        walk.pool()
    else:
        getattr(walk, key)()
    events = walk.events
    if key in SPREAD:
        events = spread_loads(events, element_bytes(config.operand_width))
    return events, walk.g["xbank"]


#: The programs whose X-bank loads (the forward's and the zero-free gradient's X, the
#: zero-free loss's dY) come in pieces under the runs before them (:func:`spread_loads`).
SPREAD = ("forward", "cf_forward", "zf_loss", "zf_gradient")


def _pieces(load, parts, nbytes):
    """``load`` cut into at most ``parts`` loads: of whole runs when it has at least ``parts``
    runs, else of the words ``[lo, hi)`` of one run each (a run's share of the ``parts``);
    ``nbytes``: bytes an element. Every element of ``load`` is in one piece."""
    if parts <= 1:
        return [load]
    out = []
    if load.count >= parts:
        for j in range(parts):
            lo, hi = dy_piece(load.count, j, parts)
            if hi > lo:
                out.append(Load(**{**vars(load), "addr": load.addr + lo * load.stride,
                                   "offset": load.offset + lo * load.run_words,
                                   "count": hi - lo, "length": (hi - lo) * load.run_len}))
        return out
    words = -(-load.run_len // load.lanes)
    for run in range(load.count):
        share = parts * (run + 1) // load.count - parts * run // load.count
        base = load.addr + run * load.stride
        for j in range(share):
            lo, hi = dy_piece(words, j, share)
            if hi > lo:
                n = min(hi * load.lanes, load.run_len) - lo * load.lanes
                out.append(Load(**{**vars(load), "addr": base + lo * load.lanes * nbytes,
                                   "offset": load.offset + run * load.run_words + lo,
                                   "length": n, "count": 1, "run_len": n,
                                   "run_words": hi - lo, "stride": 0}))
    return out


def spread_loads(events, nbytes):
    """The X-bank loads of ``events`` (targets ``FWD_X`` and ``CF_X``: X of a forward or
    zero-free gradient group, dY of a zero-free loss group, each in the half of buffer A or of
    the channel-first banks its runs read) moved under the runs before them: a group of loads
    (one, or several into the same half with no run between them, as the zero-free gradient's
    stacked blocks) that follows runs since the previous X-bank load (which read the other
    half) is cut into pieces (:func:`_pieces`), one after each of those runs from the first,
    so the DMA fills the next half while they compute instead of after them. Left in place: a
    group with a load the load unit skips (its half holds the slice, the record of
    :class:`bpsa.gateware.control.load_unit.LoadUnit`) or whose half a later load finds
    holding its slice, and one whose pieces the unit would skip or whose last piece a later
    load would take for its own slice."""
    targets = (TARGET["FWD_X"], TARGET["CF_X"])
    xs = [i for i, ev in enumerate(events) if type(ev) is Load and ev.target in targets]
    # the load unit's record of each half, in the original order: hits and who relies on one
    record, hit, relied = {}, set(), set()
    last_into = {}
    for i in xs:
        ev = events[i]
        slot = (ev.cache, ev.bank)
        if record.get(slot) == (ev.addr, ev.length):
            hit.add(i)
            relied.add(last_into[slot])
        record[slot] = (ev.addr, ev.length)
        last_into[slot] = i
    following, after = {}, {}                         # the next X load into the same half
    for i in reversed(xs):
        slot = (events[i].cache, events[i].bank)
        following[i] = after.get(slot)
        after[slot] = i
    # groups: consecutive X loads into one half with no run between them
    groups, prev = [], None
    for i in xs:
        ev = events[i]
        if (groups and prev is not None
                and (events[prev].cache, events[prev].bank) == (ev.cache, ev.bank)
                and not any(type(events[j]) is Run for j in range(prev + 1, i))):
            groups[-1][1].append(i)
        else:
            groups.append((prev, [i]))
        prev = i
    moves = {}                                        # run index -> pieces after it
    drop = set()
    record = {}
    for prev, group in groups:
        slot = (events[group[0]].cache, events[group[0]].bank)
        runs = [j for j in range(prev + 1, group[0])
                if type(events[j]) is Run] if prev is not None else []
        free = all(events[j].xbank != slot[1] for j in runs)   # they read the other half
        pieces = []
        if runs and free and not set(group) & (hit | relied):
            for k, i in enumerate(group):             # a load's share of the runs
                share = len(runs) * (k + 1) // len(group) - len(runs) * k // len(group)
                pieces += _pieces(events[i], max(share, 1), nbytes)
        keys = [(p.addr, p.length) for p in pieces]
        nxt = following[group[-1]]
        ok = len(pieces) > 1 and record.get(slot) not in keys and (
            nxt is None or (events[nxt].addr, events[nxt].length) != keys[-1])
        if ok:
            drop.update(group)
            for k, p in enumerate(pieces):            # a run each from the first, in order
                at = k if len(pieces) <= len(runs) else k * len(runs) // len(pieces)
                moves.setdefault(runs[at], []).append(p)
            record[slot] = keys[-1]
        else:
            record[slot] = (events[group[-1]].addr, events[group[-1]].length)
    out = []
    for i, ev in enumerate(events):
        if i not in drop:
            out.append(ev)
        out += moves.get(i, [])
    return out


def layer_program(config, desc, *, xbank=0):
    """The events of the loop walker for descriptor ``desc`` (field -> int, as for
    :func:`bpsa.plan.setup.run`), in its order (see the module docstring). ``xbank``: the
    walker's X bank register at the layer's start. Raises :class:`Refusal` when the set-up
    refuses the layer or the walker's arithmetic overflows."""
    return layer_program_state(config, desc, xbank=xbank)[0]
