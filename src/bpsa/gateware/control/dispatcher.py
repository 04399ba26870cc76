"""The instruction dispatcher: a layer's program (:mod:`bpsa.spec.isa`), one instruction at a
time, to the load unit, the step scheduler and the engines.

SET writes a staging register (one per field of :func:`bpsa.spec.isa.fields`, all cleared at
``start``); the registers of each struct are this component's outputs of the same name
(``layer``, ``run``, ``zrun``, ``prun``, ``geometry``, ``save_step``, ``save2_step``; the
``load`` stream's payload is the ``load`` or the ``load1`` struct, the slot the LOAD names),
which the top connects by field name. LOAD hands the load unit its slot's fields and waits
until the tile is in its bank (at once when the load unit already holds the slice); STEP
pulses ``new_step``; RUN asks the step scheduler for a run (``run_hold``: its HOLD flag) and
goes on when it has started;
SAVE and SAVE2 pulse ``save`` (with ``final_step``: the layer's last step) and ``save2``;
END asserts ``last`` until the scheduler has stored the last step, then pulses ``done``.
Nothing is computed here: the host's planner (:mod:`bpsa.plan.program`) did the arithmetic,
so there is no multiplier, divider or loop counter.

An instruction waits in an input stage (a :class:`~bpsa.gateware.common.skid.SkidBuffer`,
emptied at ``start``) with the result of its own checks, so that the fetch unit's read, the
checks and the staging registers' writes are in different cycles: one a cycle still runs.

Errors end the layer with ``fail`` and ``fail_code``: a malformed instruction or order
(``ERROR_PROGRAM | ProgramError``, :func:`bpsa.spec.isa.check`), instructions running out
(``insn_end`` with no instruction left) before END, a load's DMA error (``ERROR_DMA_BUS |
DmaError``), and the scheduler's failures (its ``sched_code``).
"""

from amaranth.hdl import Module, Mux, ResetInserter, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from bpsa.config import Config
from bpsa.gateware.bus.dma import DmaError
from bpsa.gateware.common.skid import SkidBuffer
from bpsa.spec import isa
from bpsa.spec.errors import ERROR_DMA_BUS, ERROR_PROGRAM, ProgramError

__all__ = ["Dispatcher", "struct_layout"]


def struct_layout(config, struct):
    """The layout of one struct of the staging registers: its fields, in table order."""
    return data.StructLayout({f.name: unsigned(f.bits) for f in isa.fields(config)
                              if f.struct == struct})


def _staged_layout(table):
    """An instruction in the input stage: its ``word``, the ``code`` of its own checks and
    SET's field as a one-hot ``sel`` (a bit per field of ``table``)."""
    return data.StructLayout({"word": unsigned(isa.INSN_BITS), "code": unsigned(4),
                              "sel": unsigned(len(table))})


#: Output member of each struct (the load struct is the ``load`` stream's payload).
_MEMBERS = {"layer": "layer", "run": "run", "zrun": "zrun", "prun": "prun",
            "geometry": "geometry", "save": "save_step", "save2": "save2_step"}


class Dispatcher(wiring.Component):
    """See the module docstring.

    Members
    -------
    start : In(1)
        A layer starts: every staging register is cleared, the order checks restart.
    insn : In(stream.Signature(64))
        The program's instruction words, in order (the fetch unit).
    insn_end : In(1)
        No instruction will come any more (the program's words are all fetched and taken).
    load : Out(stream.Signature(struct_layout(config, "load"))), load_done : In(1),
    load_error : In(DmaError)
        The load unit (it answers every load it took with ``load_done``, a hit too).
    new_step, save, final_step, save2 : Out(1), run_req, run_hold, last : Out(1); started,
    finished,
    sched_fail : In(1), sched_code : In(8)
        The step scheduler.
    layer, run, zrun, prun, geometry, save_step, save2_step : Out(struct_layout(...))
        The staging registers.
    busy : Out(1)
        Between ``start`` and ``done`` or ``fail``.
    fail : Out(1), fail_code : Out(8), done : Out(1)
        Pulses: the layer failed (with its STATUS.ERROR code) or is done.
    """

    def __init__(self, config):
        if not isinstance(config, Config):
            raise TypeError(f"config must be a Config, not {config!r}")
        self.config = config
        members = {"start": In(1), "insn": In(stream.Signature(isa.INSN_BITS)),
                   "insn_end": In(1),
                   "load": Out(stream.Signature(struct_layout(config, "load"))),
                   "load_done": In(1), "load_error": In(DmaError),
                   "new_step": Out(1), "save": Out(1), "final_step": Out(1), "save2": Out(1),
                   "run_req": Out(1), "run_hold": Out(1), "last": Out(1), "started": In(1), "finished": In(1),
                   "sched_fail": In(1), "sched_code": In(8),
                   "busy": Out(1), "fail": Out(1), "fail_code": Out(8), "done": Out(1)}
        for struct, member in _MEMBERS.items():
            members[member] = Out(struct_layout(config, struct))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        table = isa.fields(self.config)
        # the input stage: an instruction and the checks that do not depend on the ones before
        # it are registered before it is executed (a register slice, emptied at start)
        stage = m.submodules.stage = ResetInserter(self.start)(
            SkidBuffer(_staged_layout(table)))
        m.d.comb += [stage.i.valid.eq(self.insn.valid), self.insn.ready.eq(stage.i.ready),
                     stage.i.payload.word.eq(self.insn.payload)]
        self._predecode(m, table, self.insn.payload, stage.i.payload)
        insn = stage.o
        word = insn.payload.word
        opcode = word[isa.OPCODE_LSB:isa.OPCODE_LSB + isa.OPCODE_BITS]
        value = word[:isa.VALUE_BITS]
        ends = Signal()                     # no instruction left, none in the stage
        m.d.comb += ends.eq(self.insn_end & ~insn.valid)
        take = Signal()                     # the staged instruction is executed now
        m.d.comb += take.eq(insn.valid & insn.ready)

        stepped, ran, code = self._order(m, opcode, insn.payload.code)
        is_set = Signal()
        m.d.comb += is_set.eq(opcode == isa.Opcode.SET)
        slot, hold = self._staging(m, table, take, is_set, insn.payload.sel, value, code)
        self._sequence(m, insn, ends, opcode, value, code, stepped, ran, slot, hold)
        return m

    @staticmethod
    def _predecode(m, table, word, out):
        """The instruction's own checks (bpsa.spec.isa.check, but the order) into ``out.code``
        (its ProgramError), and SET's field as a one-hot ``out.sel``."""
        opcode = word[isa.OPCODE_LSB:isa.OPCODE_LSB + isa.OPCODE_BITS]
        index = word[isa.FIELD_LSB:isa.FIELD_LSB + isa.FIELD_BITS]
        value = word[:isa.VALUE_BITS]
        reserved = word[isa.VALUE_BITS:isa.FIELD_LSB]
        fits = Signal()                     # SET's index names a field and its value fits
        for i, f in enumerate(table):
            m.d.comb += out.sel[i].eq(index == i)
            with m.If(index == i):
                m.d.comb += fits.eq(value[f.bits:] == 0 if f.bits < isa.VALUE_BITS else 1)
        mask = (1 << isa.VALUE_BITS) - 1
        flags = {isa.Opcode.SAVE: isa.SAVE_FINAL, isa.Opcode.LOAD: isa.LOAD_SLOT,
                 isa.Opcode.RUN: isa.RUN_HOLD}
        with m.Switch(opcode):
            for op in isa.Opcode:
                with m.Case(op):
                    if op == isa.Opcode.SET:
                        with m.If(reserved != 0):
                            m.d.comb += out.code.eq(ProgramError.RESERVED)
                        with m.Elif(index >= len(table)):
                            m.d.comb += out.code.eq(ProgramError.FIELD)
                        with m.Elif(~fits):
                            m.d.comb += out.code.eq(ProgramError.RANGE)
                    else:
                        with m.If((reserved != 0) | (index != 0)
                                  | ((value & (mask & ~flags.get(op, 0))) != 0)):
                            m.d.comb += out.code.eq(ProgramError.RESERVED)
            with m.Default():
                m.d.comb += out.code.eq(ProgramError.OPCODE)

    @staticmethod
    def _order(m, opcode, static):
        """The order checks after the instruction's own (``static``). Returns the order flags
        ``stepped`` (a STEP since start) and ``ran`` (a RUN since the last STEP), which the
        sequence sets, and ``code`` (the instruction's ProgramError)."""
        stepped, ran = Signal(), Signal()
        code = Signal(4)
        m.d.comb += code.eq(static)
        with m.If(static == ProgramError.NONE):
            with m.If((opcode == isa.Opcode.RUN) & ~stepped):
                m.d.comb += code.eq(ProgramError.ORDER)
            with m.If(((opcode == isa.Opcode.SAVE) | (opcode == isa.Opcode.SAVE2)
                       | (opcode == isa.Opcode.END)) & ~ran):
                m.d.comb += code.eq(ProgramError.ORDER)
        return stepped, ran, code

    def _staging(self, m, table, take, is_set, sel, value, code):
        """The staging registers: written by SET, cleared at start; LOAD hands on the fields of
        the slot it names. Returns the LOAD's ``slot`` and the RUN's ``hold`` registers, which
        the sequence sets."""
        slots = {s: Signal(struct_layout(self.config, "load"), name=f"{s}_slot")
                 for s in ("load", "load1")}
        slot = Signal()
        hold = Signal()                     # the RUN's HOLD flag
        m.d.comb += [self.load.payload.eq(Mux(slot, slots["load1"], slots["load"])),
                     self.run_hold.eq(hold)]
        for i, f in enumerate(table):
            reg = getattr(slots[f.struct] if f.struct in slots
                          else getattr(self, _MEMBERS[f.struct]), f.name)
            with m.If(self.start):
                m.d.sync += reg.eq(0)
            with m.Elif(take & is_set & sel[i] & (code == ProgramError.NONE)):
                m.d.sync += reg.eq(value[:f.bits])
        return slot, hold

    def _fail(self, m, code_value):
        """End the layer with ``fail`` and ``fail_code`` = ``code_value``."""
        m.d.comb += [self.fail.eq(1), self.fail_code.eq(code_value)]
        m.next = "IDLE"

    def _sequence(self, m, insn, ends, opcode, value, code, stepped, ran, slot, hold):
        """The instructions' state machine (IDLE, EXEC, LOAD, LOAD_WAIT, RUN, LAST) and
        ``busy``."""
        with m.FSM(name="dispatch") as fsm:
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [stepped.eq(0), ran.eq(0)]
                    m.next = "EXEC"
            with m.State("EXEC"):
                m.d.comb += insn.ready.eq(1)
                with m.If(insn.valid):
                    with m.If(code != ProgramError.NONE):
                        self._fail(m, ERROR_PROGRAM | code)
                    with m.Else():
                        with m.Switch(opcode):
                            with m.Case(isa.Opcode.LOAD):
                                m.d.sync += slot.eq(value[0])
                                m.next = "LOAD"
                            with m.Case(isa.Opcode.STEP):
                                m.d.comb += self.new_step.eq(1)
                                m.d.sync += [stepped.eq(1), ran.eq(0)]
                            with m.Case(isa.Opcode.RUN):
                                m.d.sync += hold.eq(value[0])
                                m.next = "RUN"
                            with m.Case(isa.Opcode.SAVE):
                                m.d.comb += [self.save.eq(1),
                                             self.final_step.eq(value[0])]
                            with m.Case(isa.Opcode.SAVE2):
                                m.d.comb += self.save2.eq(1)
                            with m.Case(isa.Opcode.END):
                                m.next = "LAST"
                with m.Elif(ends):
                    self._fail(m, ERROR_PROGRAM | ProgramError.END)
            with m.State("LOAD"):
                m.d.comb += self.load.valid.eq(1)
                with m.If(self.load.ready):
                    m.next = "LOAD_WAIT"
            with m.State("LOAD_WAIT"):
                with m.If(self.load_done):
                    with m.If(self.load_error != DmaError.NONE):
                        self._fail(m, ERROR_DMA_BUS | self.load_error.as_value())
                    with m.Else():
                        m.next = "EXEC"
            with m.State("RUN"):
                m.d.comb += self.run_req.eq(1)
                with m.If(self.sched_fail):
                    self._fail(m, self.sched_code)
                with m.Elif(self.started):
                    m.d.sync += ran.eq(1)
                    m.next = "EXEC"
            with m.State("LAST"):
                m.d.comb += self.last.eq(1)
                with m.If(self.sched_fail):
                    self._fail(m, self.sched_code)
                with m.Elif(self.finished):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
