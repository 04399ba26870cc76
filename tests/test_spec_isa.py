"""The instruction set: word layout, the decoder's checks, the assembler and the model of the
dispatcher, and every field no wider than what reads it in the hardware."""

import pytest
from amaranth.hdl import Shape

from bpsa.config import load_config
from bpsa.spec import isa
from bpsa.spec.errors import ERROR_PROGRAM, ProgramError, error_name

CONFIGS = [load_config(name) for name in ("small", "ecp5_train", "paper16", "ice40")]
OP = isa.Opcode


def test_encode_decode_round_trip_and_layout():
    word = isa.encode(OP.SET, 17, (1 << isa.VALUE_BITS) - 1)
    assert word >> isa.OPCODE_LSB == OP.SET
    assert isa.decode(word) == (OP.SET, 17, (1 << isa.VALUE_BITS) - 1, 0)
    assert isa.decode(isa.encode(OP.SAVE, 0, isa.SAVE_FINAL)) == (OP.SAVE, 0, 1, 0)
    assert isa.OPCODE_LSB + isa.OPCODE_BITS == isa.INSN_BITS
    assert isa.FIELD_LSB + isa.FIELD_BITS == isa.OPCODE_LSB and isa.VALUE_BITS <= isa.FIELD_LSB
    with pytest.raises(ValueError):
        isa.encode(OP.SET, 1 << isa.FIELD_BITS, 0)
    with pytest.raises(ValueError):
        isa.encode(OP.SET, 0, 1 << isa.VALUE_BITS)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_check_flags_each_malformed_word(config):
    table = isa.fields(config)
    narrow = next(i for i, f in enumerate(table) if f.bits < isa.VALUE_BITS)
    assert isa.check(config, isa.encode(OP.SET, narrow, (1 << table[narrow].bits) - 1)) == 0
    assert isa.check(config, isa.encode(OP.SET, narrow, 1 << table[narrow].bits)) == \
        ProgramError.RANGE
    assert isa.check(config, isa.encode(OP.SET, len(table), 0)) == ProgramError.FIELD
    assert isa.check(config, 0) == ProgramError.OPCODE
    assert isa.check(config, 15 << isa.OPCODE_LSB) == ProgramError.OPCODE
    assert isa.check(config, isa.encode(OP.RUN) | 1 << isa.VALUE_BITS) == ProgramError.RESERVED
    assert isa.check(config, isa.encode(OP.RUN, 0, isa.RUN_HOLD)) == 0
    assert isa.check(config, isa.encode(OP.RUN, 0, 2)) == ProgramError.RESERVED
    assert isa.check(config, isa.encode(OP.SAVE, 0, 1)) == 0
    assert isa.check(config, isa.encode(OP.SAVE, 0, 3)) == ProgramError.RESERVED
    assert isa.check(config, isa.encode(OP.LOAD, 0, isa.LOAD_SLOT)) == 0
    assert isa.check(config, isa.encode(OP.LOAD, 0, 2)) == ProgramError.RESERVED
    # the two load slots hold the same fields
    loads = [[(f.name, f.bits) for f in table if f.struct == s] for s in ("load", "load1")]
    assert loads[0] == loads[1] and loads[0]
    assert isa.check(config, isa.encode(OP.END, 1)) == ProgramError.RESERVED
    # keys are unique and every struct is documented
    assert len({f.key for f in table}) == len(table) <= 1 << isa.FIELD_BITS
    assert {f.struct for f in table} == set(isa.STRUCTS)


def test_execute_follows_order_and_end():
    config = CONFIGS[0]
    ops = [(OP.STEP, {}, 0), (OP.LOAD, {"load.addr": 8, "load.length": 4}, 0),
           (OP.RUN, {"run.channels": 2}, 0), (OP.SAVE, {"save.rows": 3}, 1), (OP.END, {}, 0)]
    words = isa.assemble(config, ops)
    trace, code = isa.execute(config, words)
    assert code == 0 and [t[0] for t in trace] == [o[0] for o in ops]
    assert trace[1][1]["load.addr"] == 8 and trace[2][1]["run.channels"] == 2
    assert trace[3][1]["save.rows"] == 3 and trace[3][2] == 1
    assert isa.execute(config, words[:-1])[1] == ERROR_PROGRAM | ProgramError.END
    assert isa.execute(config, words, end=2)[1] == ERROR_PROGRAM | ProgramError.END
    assert isa.execute(config, [isa.encode(OP.RUN)])[1] == ERROR_PROGRAM | ProgramError.ORDER
    assert error_name(ERROR_PROGRAM | ProgramError.RANGE) == "PROGRAM:RANGE"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_fields_fit_what_reads_them(config):
    """No load or store field is wider than the hardware input it drives (a SET would be cut
    short): the load unit's loads, the step scheduler's stores."""
    from bpsa.gateware.control.load_unit import load_layout
    from bpsa.gateware.control.step_scheduler import store2_layout, store_layout
    readers = {"load": load_layout(config), "load1": load_layout(config), "save": store_layout(),
               "save2": store2_layout()}
    checked = 0
    for f in isa.fields(config):
        layout = readers.get(f.struct)
        if layout is None or f.name not in layout.members:
            assert f.struct not in ("load", "load1", "save", "save2"), f.key
            continue
        assert f.bits <= Shape.cast(layout[f.name].shape).width, f.key
        checked += 1
    assert checked >= 30          # every load and store field
