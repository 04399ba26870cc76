"""The accelerator's instruction set: how the host's plan of a layer reaches the hardware.

The host's planner (:mod:`bpsa.plan.program`) turns a layer into the sequence of loads, runs
and stores that the on-chip loop walker used to compute; this module is the one definition of
how that sequence is written as instructions, which the driver assembles, the hardware decodes
and the cycle model reads. Pure Python.

Instruction word (64 bits, little endian, in order from the program's address; a 64-bit beat)
    ==========  ======  ==============================================================
    bits        name    contents
    ==========  ======  ==============================================================
    [63:60]     opcode  :class:`Opcode`
    [59:52]     field   SET: the index of the field written (:func:`fields`); 0 otherwise
    [51:48]     -       reserved, 0
    [47:0]      value   SET: the field's value (zero-extended); SAVE: bit 0 is FINAL;
                        LOAD: bit 0 is the slot; RUN: bit 0 is HOLD; 0 otherwise
    ==========  ======  ==============================================================

Opcodes
    ``SET``: write one field of the staging registers (every field is 0 at START, and keeps
    its value until the next SET of it: a program writes only the fields that change).
    ``LOAD``: hand the ``load.*`` fields (slot 0) or the ``load1.*`` fields (slot 1, value bit
    0) to the load unit (one tile of an operand into a bank of a buffer, a DMA read; the load
    unit skips it when the bank holds that slice already) and wait until it is in the bank.
    Two slots let a group's two loads (X and W, dY and X, ...) keep their fields, so a program
    SETs only the addresses that move. ``STEP``: the next run starts a new step (its results
    are added up in a cleared P). ``RUN``: the engine of ``layer.phase`` / ``layer.mode`` runs
    the group just loaded, with the ``run.*`` fields (plus ``zrun.*`` for the zero-free loss,
    ``prun.*`` for pooling and ``geometry.*``: where its results go in P); dispatch goes on
    as soon as the run has started, so the next group's loads overlap it. A RUN with HOLD
    (value bit 0) reads the same half of buffer B as the run before it, and the next load
    of the scheduler's bank still goes to the other half (the zero-free gradient's runs of a
    step's input-channel blocks share one dY block). ``SAVE``: the step
    whose last run just started stores ``save.*`` (``rows`` rows of ``length`` elements,
    ``nb`` P words apart, ``stride`` bytes apart in memory from ``addr``) once its runs are
    done; FINAL marks the layer's last step. ``SAVE2`` (FC backward): a second store after
    the step's, ``save2.*``. ``END``: wait for the last step's store; the layer is DONE.
    Opcode 0 is not an instruction, so a program that runs into zeroed memory stops with an
    error instead of running.

Order is the only synchronisation: instructions are dispatched one at a time, in order; a
LOAD after a RUN fills the other bank while that run computes (the run in flight reads the
bank of its parity, and a RUN is dispatched only when the engine has started the one before).
So a load never overwrites a bank a run still reads, and no dependency token is needed. A
HOLD run keeps its predecessor's half of buffer B: the bank each run reads is the parity of
the RUNs without HOLD before it, including itself when it holds.

Checks (STATUS.ERROR ``ERROR_PROGRAM | code``, :class:`bpsa.spec.errors.ProgramError`;
nothing more is dispatched, DONE is raised, no byte is written after the faulty instruction):
an opcode that is not one of :class:`Opcode` (``OPCODE``), reserved bits set (``RESERVED``),
a SET of a field index past the table (``FIELD``) or of a value wider than the field
(``RANGE``), a SAVE, SAVE2 or END with no RUN since the last STEP, or a RUN with no STEP
since START (``ORDER``), and a program that ends (``PROG_WORDS`` instructions fetched)
without END (``END``). Loads and stores are checked by the DMA (``ERROR_DMA_BUS |
DmaError``: outside the DMA window, misaligned, past a buffer's end) before any bus traffic.
"""

import enum
from dataclasses import dataclass

from bpsa.spec import regmap

__all__ = ["FIELD_BITS", "FIELD_LSB", "INSN_BITS", "INSN_BYTES", "OPCODE_BITS", "OPCODE_LSB",
           "LOAD_SLOT", "RUN_HOLD", "SAVE_FINAL", "STRUCTS", "VALUE_BITS", "Field", "Opcode",
           "assemble",
           "check", "decode", "encode", "execute", "field_index", "fields", "isa_map",
           "set_counts"]

#: Bits of an instruction.
INSN_BITS = 64
#: Bytes of an instruction in memory.
INSN_BYTES = INSN_BITS // 8
#: The opcode's bits, ``[OPCODE_LSB + OPCODE_BITS - 1 : OPCODE_LSB]``.
OPCODE_LSB, OPCODE_BITS = 60, 4
#: SET's field index, ``[FIELD_LSB + FIELD_BITS - 1 : FIELD_LSB]``.
FIELD_LSB, FIELD_BITS = 52, 8
#: SET's value (and SAVE's flags), ``[VALUE_BITS - 1 : 0]``.
VALUE_BITS = 48


class Opcode(enum.IntEnum):
    """The instruction's opcode (see the module docstring). 0 and 8-15 are not instructions."""
    SET = 1
    LOAD = 2
    STEP = 3
    RUN = 4
    SAVE = 5
    SAVE2 = 6
    END = 7


#: SAVE's value bit: the layer's last step.
SAVE_FINAL = 1
#: LOAD's value bit: the slot whose fields the load unit gets (``load1.*``, else ``load.*``).
LOAD_SLOT = 1
#: RUN's value bit: the run reads the half of buffer B the run before it read, and the
#: scheduler's bank does not toggle.
RUN_HOLD = 1


@dataclass(frozen=True)
class Field:
    """One field of the staging registers: ``struct.name``, ``bits`` wide."""
    struct: str
    name: str
    bits: int
    doc: str

    @property
    def key(self):
        return f"{self.struct}.{self.name}"


#: The staging registers' structures, in field-index order, and who reads them.
STRUCTS = {
    "layer": "the layer's constants: its descriptor, and what the engines read of the plan",
    "load": "the next LOAD of slot 0 (the load unit)",
    "load1": "the next LOAD of slot 1 (LOAD's value bit 0 picks the slot: a group's two loads "
             "keep their fields apart)",
    "run": "the next RUN: the group's sizes and band, which half of buffer A holds X",
    "zrun": "the next RUN of a zero-free loss: its stride-class quotients and blocks",
    "prun": "the next RUN of a pooling phase: its band",
    "geometry": "the next RUN's results in P (result addressing) and the P words its step "
                "clears",
    "save": "the next SAVE",
    "save2": "the next SAVE2",
}


def fields(config):
    """The field table of ``config``, in index order (a SET's ``field`` is the position)."""
    dim, dim2 = config.dim_width, config.dim_width + 2
    # sizes in memory (elements, bytes; 33 bits: a tensor of the 4 GiB space and one past it),
    # in a buffer (words: the deepest buffer and one past it), and the rest (the set-up unit's)
    unit, addr, mem = VALUE_BITS, 33, 33
    depth = max(config.buf_a_depth, config.buf_b_depth, config.buf_p_depth,
                config.buf_pool_depth if config.has_pool() else 0,
                config.buf_cf_depth if config.has_frontend("channel_first") else 0)
    buf = depth.bit_length()
    paw = (config.buf_p_depth - 1).bit_length()
    word = max(config.feeder_bus_width * config.operand_width, config.cols * config.operand_width,
               config.cols * config.result_width, config.rows * config.operand_width)
    lanes = (word // min(config.operand_width, config.result_width)).bit_length()
    out = []

    def add(struct, specs):
        for name, bits, doc in specs:
            out.append(Field(struct, name, bits, doc))

    # the descriptor: the engines read its shape fields; N and the addresses (which the loads
    # and stores carry) make the program self-describing
    add("layer", [(name, regmap.field_bits(config, width), doc)
                  for name, _, width, _, doc in regmap.LAYER_FIELDS])
    add("layer", [
        ("oh", dim, "output height of the layer"), ("ow", dim, "output width of the layer"),
        ("dbl", 1, "P is double-buffered: a step's store overlaps the next step"),
        ("rs", 2 * dim, "R S (pooling: the window's elements)"),
        ("fwoff", buf, "FC backward: buffer B word where W starts"),
        ("qw0", dim2, "pooling: the first window column's quotient"),
        ("rw0", dim2, "pooling: the first window column's remainder"),
        ("recip", unit, "average pooling: the reciprocal of the window, fixed point")])
    load = [
        ("target", 3, "buffer written (0 forward X, 1 forward W, 2 backward A, 3 backward B, "
                      "4 pooling, 5 channel-first X, 6 channel-first X scales (MX))"),
        ("cache", 3, "slice record checked (0 A, 1 B, 2 FC W, 3 pooling X, 4 pooling dY, "
                     "5 channel-first X, 6 channel-first X scales)"),
        ("bank", 1, "bank of the buffer"), ("offset", buf, "first buffer word in the bank"),
        ("addr", addr, "external byte address"), ("length", mem, "elements in all"),
        ("lanes", lanes, "elements a buffer word"), ("count", mem, "runs"),
        ("run_len", mem, "elements a run"),
        ("run_words", mem, "buffer words from one run to the next (count > 1)"),
        ("stride", mem, "bytes between runs in memory")]
    add("load", load)
    add("load1", load)
    add("run", [
        ("batch", dim, "FC backward: batch rows"), ("channels", dim, "input channels"),
        ("out_channels", dim, "output channels"), ("height", dim2, "the band's input rows"),
        ("out_height", dim2, "the band's output rows"), ("pad_top", dim2, "the band's top padding"),
        ("pad_bottom", dim2, "the band's bottom padding"),
        ("xbank", 1, "forward, zero-free phases: the half of buffer A holding the run's X / dY"),
        ("x_off", buf, "zero-free gradient: the run's X block from this word of its half of A"),
        ("w_off", buf, "zero-free loss: the run's W block from this word of its half of B")])
    add("zrun", [(name, dim2, doc) for name, doc in (
        ("pt_q", "top padding // stride_h"), ("pt_r", "top padding % stride_h"),
        ("pw_q", "pad_w // stride_w"), ("pw_r", "pad_w % stride_w"),
        ("dh_q", "dil_h // stride_h"), ("dh_r", "dil_h % stride_h"),
        ("dw_q", "dil_w // stride_w"), ("dw_r", "dil_w % stride_w"),
        ("kblocks", "blocks of output channels"), ("kvalid", "channels of the last block"))]
        + [("plane", 2 * dim2, "dY words a block")])
    add("prun", [(name, dim2, doc) for name, doc in (
        ("y0", "first output (dX) row"), ("rows", "output rows"), ("xlo", "first X row loaded"),
        ("dlo", "first dY row loaded"), ("drows", "dY rows loaded"), ("q0", "walk start"),
        ("rem0", "walk start remainder"))]
        + [("x_plane", buf, "buffer words of a plane's X"),
           ("d_plane", buf, "buffer words of a plane's dY"),
           ("d_offset", buf, "where dY starts in the bank")])
    add("geometry", [
        ("p_row", buf, "P words a result row"), ("row_base", dim + 1, "first result row"),
        ("kt_rows", unit, "row tiles a column block"), ("fc_o0", dim, "FC: first output"),
        ("fc_dw_p0", paw + 1, "FC: P word of dW row 0"),
        ("clear_words", buf, "P words the step clears")])
    add("save", [
        ("rows", buf, "rows"), ("length", mem, "elements a row"),
        ("nb", buf, "P words between rows"), ("stride", mem, "bytes between rows in memory"),
        ("addr", addr, "external byte address of the first row")])
    add("save2", [("rows", buf, "rows"), ("p0", buf, "first P word"),
                  ("addr", addr, "external byte address")])
    assert len(out) <= 1 << FIELD_BITS and all(f.bits <= VALUE_BITS for f in out)
    return out


def field_index(config):
    """``{"struct.name": index}`` of :func:`fields`."""
    return {f.key: i for i, f in enumerate(fields(config))}


def encode(opcode, field=0, value=0):
    """One instruction word (see the module docstring)."""
    opcode = Opcode(opcode)
    if not 0 <= field < 1 << FIELD_BITS or not 0 <= value < 1 << VALUE_BITS:
        raise ValueError(f"field {field} or value {value} does not fit the instruction")
    return (int(opcode) << OPCODE_LSB) | (field << FIELD_LSB) | value


def decode(word):
    """``(opcode as an int, field, value, reserved bits)`` of an instruction word."""
    return ((word >> OPCODE_LSB) & ((1 << OPCODE_BITS) - 1),
            (word >> FIELD_LSB) & ((1 << FIELD_BITS) - 1),
            word & ((1 << VALUE_BITS) - 1),
            (word >> VALUE_BITS) & ((1 << (FIELD_LSB - VALUE_BITS)) - 1))


def check(config, word):
    """The :class:`bpsa.spec.errors.ProgramError` the decoder flags for ``word`` on its own
    (``NONE`` when it is well formed; the order checks are the dispatcher's)."""
    from bpsa.spec.errors import ProgramError
    opcode, field, value, reserved = decode(word)
    if opcode not in Opcode._value2member_map_:
        return ProgramError.OPCODE
    allowed = {Opcode.SET: None, Opcode.SAVE: SAVE_FINAL, Opcode.LOAD: LOAD_SLOT,
               Opcode.RUN: RUN_HOLD}.get(Opcode(opcode), 0)
    if reserved or (allowed is not None and (value & ~allowed or field)):
        return ProgramError.RESERVED
    if opcode == Opcode.SET:
        table = fields(config)
        if field >= len(table):
            return ProgramError.FIELD
        if value >> table[field].bits:
            return ProgramError.RANGE
    return ProgramError.NONE


def isa_map(config):
    """The instruction set of ``config`` as a JSON-ready dict: word layout, opcodes and the
    field table (index, struct, name, bits, doc)."""
    return {
        "insn_bits": INSN_BITS,
        "opcode": {"lsb": OPCODE_LSB, "bits": OPCODE_BITS},
        "field": {"lsb": FIELD_LSB, "bits": FIELD_BITS},
        "value": {"lsb": 0, "bits": VALUE_BITS},
        "save_final": SAVE_FINAL,
        "load_slot": LOAD_SLOT,
        "run_hold": RUN_HOLD,
        "opcodes": {op.name: int(op) for op in Opcode},
        "structs": dict(STRUCTS),
        "fields": [{"index": i, "struct": f.struct, "name": f.name, "bits": f.bits,
                    "doc": f.doc} for i, f in enumerate(fields(config))],
    }


def _changes(config, ops):
    """Per op of ``ops`` (see :func:`assemble`): ``(opcode, flags, [(index, value)])``, the
    fields it SETs (those whose value differs from what the staging registers hold)."""
    table = fields(config)
    index = {f.key: (i, 1 << f.bits) for i, f in enumerate(table)}
    state = {}
    for opcode, values, flags in ops:
        sets = []
        for key, v in values.items():
            if key not in index:
                raise ValueError(f"no instruction field {key!r}")
            i, limit = index[key]
            if not 0 <= v < limit:
                raise ValueError(f"{key} = {v} does not fit its {table[i].bits} bits "
                                 f"(configuration {config.name!r})")
            if state.get(i, 0) != v:
                sets.append((i, int(v)))
                state[i] = v
        yield opcode, flags, sets


def assemble(config, ops):
    """The words of a program: ``ops`` is a sequence of ``(opcode, fields, flags)`` (``fields``:
    ``{"struct.name": value}`` the instruction needs, ``flags``: SAVE's value); each becomes
    the SETs of the fields whose value differs from what the staging registers hold (0 at
    START), then the instruction. :exc:`ValueError` names a field that does not exist or a
    value that does not fit it."""
    words = []
    head = int(Opcode.SET) << OPCODE_LSB
    for opcode, flags, sets in _changes(config, ops):
        words += [head | (i << FIELD_LSB) | v for i, v in sets]
        words.append(encode(opcode, 0, flags))
    return words


def set_counts(config, ops):
    """``(opcode, SET words before it)`` of every op of ``ops``, as :func:`assemble` writes
    them (without building the words)."""
    return [(Opcode(opcode), len(sets)) for opcode, _, sets in _changes(config, ops)]


def execute(config, words, *, end=None):
    """What the dispatcher does with ``words``, as a list of ``(opcode, staging registers
    as {"struct.name": value}, flags)`` for every instruction but SET, and the STATUS.ERROR
    code it stops with (0 after END). ``end``: the program's length in words (default
    ``len(words)``); running past it without END is ``ProgramError.END``."""
    from bpsa.spec.errors import ERROR_PROGRAM, ProgramError
    table = fields(config)
    state = {f.key: 0 for f in table}
    trace, stepped, ran = [], False, False
    for word in words[:len(words) if end is None else end]:
        code = check(config, word)
        opcode, field, value, _ = decode(word)
        if code == ProgramError.NONE:
            if opcode in (Opcode.SAVE, Opcode.SAVE2, Opcode.END) and not ran:
                code = ProgramError.ORDER
            elif opcode == Opcode.RUN and not stepped:
                code = ProgramError.ORDER
        if code != ProgramError.NONE:
            return trace, ERROR_PROGRAM | code
        if opcode == Opcode.SET:
            state[table[field].key] = value
            continue
        trace.append((Opcode(opcode), dict(state), value))
        if opcode == Opcode.STEP:
            stepped, ran = True, False
        elif opcode == Opcode.RUN:
            ran = True
        elif opcode == Opcode.END:
            return trace, 0
    return trace, ERROR_PROGRAM | ProgramError.END
