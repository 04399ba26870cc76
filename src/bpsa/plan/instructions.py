"""A layer's program as instruction words: the events of :func:`bpsa.plan.program.layer_program`
written in the instruction set of :mod:`bpsa.spec.isa`.

The layer's constants come first (SETs of ``layer.*``: the descriptor's fields the engines
read and the plan registers they read, from :func:`bpsa.plan.setup.run`), attached to the first
instruction; then one instruction an event, each after the SETs of the fields it needs that
changed: :class:`~bpsa.plan.program.Step` is STEP, :class:`~bpsa.plan.program.Load` LOAD
(``load.*`` or ``load1.*``, the slot of :func:`_slot`; of a single run, not ``run_words`` and ``stride``, which the load unit reads only
between runs), :class:`~bpsa.plan.program.Run` RUN (the fields its phase's consumers read,
:data:`bpsa.plan.program.RUN_FIELDS`; HOLD when the run holds), :class:`~bpsa.plan.program.Save` SAVE (``save.*``,
FINAL), :class:`~bpsa.plan.program.Save2` SAVE2 and :class:`~bpsa.plan.program.Last` END.
The driver, the RTL (through the dispatcher) and the cycle model read these words.
"""

from bpsa.plan import program, setup
from bpsa.spec import isa

__all__ = ["PLAN_FIELDS", "RUN_STRUCT", "layer_ops", "program_words"]

#: The ``layer.*`` fields that are plan registers (:data:`bpsa.plan.setup.PLAN_REGISTERS`); the
#: others are the descriptor's.
PLAN_FIELDS = ("oh", "ow", "dbl", "rs", "fwoff", "qw0", "rw0", "recip")

#: The struct of :mod:`bpsa.spec.isa` each :class:`~bpsa.plan.program.Run` field is in.
RUN_STRUCT = {
    **{name: "run" for name in ("batch", "channels", "out_channels", "height", "out_height",
                                "pad_top", "pad_bottom", "xbank", "x_off", "w_off")},
    **{name: "zrun" for name in ("pt_q", "pt_r", "pw_q", "pw_r", "dh_q", "dh_r", "dw_q",
                                 "dw_r", "kblocks", "kvalid", "plane")},
    **{name: "prun" for name in ("y0", "rows", "xlo", "dlo", "drows", "q0", "rem0", "x_plane",
                                 "d_plane", "d_offset")},
    **{name: "geometry" for name in ("p_row", "row_base", "kt_rows", "fc_o0", "fc_dw_p0",
                                     "clear_words")},
}


_RUN_KEYS = {name: f"{struct}.{name}" for name, struct in RUN_STRUCT.items()}
_LOAD_KEYS = [{name: f"{struct}.{name}" for name in (
    "target", "cache", "bank", "offset", "addr", "length", "lanes", "count", "run_len",
    "run_words", "stride")} for struct in ("load", "load1")]


def _slot(load):
    """The load slot of a :class:`~bpsa.plan.program.Load`: 1 for the second operand of a group
    (the forward's W, buffer B, the pooling backward's dY), 0 for the first (X, buffer A, the
    FC weights): a group's loads then keep their fields, and only their addresses move."""
    target, cache = program.TARGET, program.CACHE
    second = ((load.target in (target["FWD_W"], target["BWD_B"]) and load.cache != cache["W"])
              or load.cache == cache["POOL_DY"])
    return int(second)


def layer_ops(config, desc):
    """``(opcode, fields, flags)`` of the layer ``desc`` (the descriptor dict of
    :func:`bpsa.plan.setup.run`), for :func:`bpsa.spec.isa.assemble`; a refused layer raises
    :class:`bpsa.plan.grammar.Refusal` as the planner does."""
    regs = setup.run(config, desc)
    events = program.layer_program(config, desc)
    layer = {f.key: int(regs[f.name] if f.name in PLAN_FIELDS else desc.get(f.name, 0))
             for f in isa.fields(config) if f.struct == "layer"}
    ops = []
    for ev in events:
        kind = type(ev)
        if kind is program.Step:
            ops.append((isa.Opcode.STEP, {}, 0))
        elif kind is program.Load:
            # a load of one run: its run_words and stride are never read (left as they are)
            skip = ("run_words", "stride") if ev.count == 1 else ()
            slot = _slot(ev)
            keys = _LOAD_KEYS[slot]
            ops.append((isa.Opcode.LOAD, {keys[k]: v for k, v in vars(ev).items()
                                          if k not in skip}, isa.LOAD_SLOT if slot else 0))
        elif kind is program.Run:
            ops.append((isa.Opcode.RUN, {_RUN_KEYS[k]: v for k, v in vars(ev).items()
                                         if v is not None and k != "hold"},
                        isa.RUN_HOLD if ev.hold else 0))
        elif kind is program.Save:
            values = dict(vars(ev))
            final = values.pop("final")
            ops.append((isa.Opcode.SAVE, {f"save.{k}": v for k, v in values.items()},
                        isa.SAVE_FINAL if final else 0))
        elif kind is program.Save2:
            ops.append((isa.Opcode.SAVE2, {f"save2.{k}": v for k, v in vars(ev).items()}, 0))
        elif kind is program.Last:
            ops.append((isa.Opcode.END, {}, 0))
        else:
            raise TypeError(f"unknown event {ev!r}")
    if ops:
        opcode, values, flags = ops[0]
        ops[0] = (opcode, {**layer, **values}, flags)
    return ops


def program_words(config, desc):
    """The instruction words of the layer ``desc`` (see the module docstring)."""
    return isa.assemble(config, layer_ops(config, desc))
