"""The step scheduler: engine runs, and between the steps of a layer the P buffer's store and
clear, in the order results need.

A layer is a sequence of *steps*; a step is one or more engine runs (groups) whose results add
up in P. The dispatcher (the layer's program) loads a group's operands, then asks for a run (``run``);
when the group starts a new step (``new_step``), the scheduler first waits for the previous
run's accumulations to land (FLUSH), stores the finished step's P rows through the DMA when
one is pending (a store machine beside the step machine), clears P for the new step (CLEAR),
then starts the engine (RUN) and toggles the bank (a run with ``hold`` reads the bank of the
run before it and leaves the toggle alone). With ``double`` (the zero-free phases) the
steps alternate between the two halves of P and the store runs while the next step computes;
otherwise the step waits for its store. The program tells it what a step's store needs as
soon as the step's last group has started (``save``), so the next step's first loads overlap
that run; ``last`` (the layer's last step) waits for the last run and stores it. A row is
stored in commands of at most ``STORE_CHUNK`` P words.
"""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from bpsa.config import Config
from bpsa.gateware.bus.dma import DmaError, Direction, ElementKind
from bpsa.gateware.control.load_unit import dma_command_layout
from bpsa.spec.errors import ERROR_DMA_BUS, ERROR_ENGINE
from bpsa.plan.setup import STORE_CHUNK
from bpsa.spec.numeric import element_bytes

__all__ = ["STORE_CHUNK", "StepScheduler", "store_layout"]

_W = 48



def store_layout():
    """What a finished step's store needs: ``rows`` rows of ``length`` elements, ``stride``
    bytes apart in memory from ``addr``, ``nb`` words apart in P from word 0."""
    return data.StructLayout({"rows": unsigned(_W), "length": unsigned(_W),
                              "nb": unsigned(_W), "stride": unsigned(_W),
                              "addr": unsigned(33)})


def store2_layout():
    """FC backward: a second store after a step's (the input block's dW rows): ``rows`` rows
    from P word ``p0`` to ``addr``."""
    return data.StructLayout({"rows": unsigned(_W), "p0": unsigned(_W), "addr": unsigned(33)})


class StepScheduler(wiring.Component):
    """See the module docstring.

    Members
    -------
    layer_start : In(1)
        A layer starts: bank 0, nothing pending.
    run : In(1), hold : In(1)
        The dispatcher waits for its loaded group to run; ``started`` pulses when the engine
        starts it. ``hold`` (with ``run``): the run reads the bank the run before it read.
    last : In(1)
        The program is done (END): wait for the last run and store the last step;
        ``finished`` pulses when the store is done.
    new_step, final_save : In(1)
        Pulses: the next run starts a new step; the step now saved is the layer's last.
    save : In(1), save_step : In(store_layout())
        Pulse: the step whose last group just started, for its store.
    save2 : In(1), save2_step : In(store2_layout())
        FC backward: pulse, a second store after the saved step's.
    clear_words : In(48)
        P words the next step uses (cleared before its first run).
    started, finished : Out(1)
    fail : Out(1), fail_code : Out(8)
        The engine refused a run (``ERROR_ENGINE | code``) or a store failed
        (``ERROR_DMA_BUS | DmaError``).
    bank : Out(1)
        The buffer half the run being started reads (with ``hold``: the half of the run
        before it).
    eng_start : Out(1), eng_busy, eng_error : In(1), eng_code : In(4)
        The engine of the layer's phase.
    p_clear : Out(1), p_clear_words : Out(48), p_clear_last : In(1), p_busy : In(1)
        The P buffer's clear pass and accumulate pipeline.
    storing : Out(1)
        A store runs (P's read port serves the DMA).
    double : In(1)
        The layer double-buffers P: its steps alternate between the two halves of P
        (``p_base`` 0 or ``buf_p_depth / 2``), and a finished step's store runs while the next
        step computes in the other half. Otherwise the next step waits for the store.
    requant : In(1)
        The layer's output leaves as operands (the descriptor's REQUANT): stores move
        operands (the requantizer packs them into the P word the DMA reads), and a chunk's
        memory address advances by operand bytes.
    abort : In(1)
        The layer failed elsewhere (a load): a background store starts no further command.
    p_base : Out(log2(buf_p_depth))
        The first P word of the current step (added to every result's P word and to the
        clear pass).
    dma_valid : Out(1), dma_cmd : Out(DMA command), dma_ready, dma_done : In(1),
    dma_error : In(DmaError)
    """

    def __init__(self, config):
        if not isinstance(config, Config):
            raise TypeError(f"config must be a Config, not {config!r}")
        self.config = config
        super().__init__({
            "layer_start": In(1), "run": In(1), "hold": In(1), "last": In(1), "new_step": In(1),
            "final_save": In(1), "save": In(1), "save_step": In(store_layout()),
            "save2": In(1), "save2_step": In(store2_layout()), "clear_words": In(_W),
            "started": Out(1), "finished": Out(1), "fail": Out(1), "fail_code": Out(8),
            "bank": Out(1),
            "eng_start": Out(1), "eng_busy": In(1), "eng_error": In(1), "eng_code": In(4),
            "p_clear": Out(1), "p_clear_words": Out(_W), "p_clear_last": In(1),
            "p_busy": In(1), "storing": Out(1), "double": In(1), "abort": In(1),
            "requant": In(1),
            "p_base": Out(range(config.buf_p_depth)),
            "dma_valid": Out(1), "dma_cmd": Out(dma_command_layout(config)),
            "dma_ready": In(1), "dma_done": In(1), "dma_error": In(DmaError),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        half = cfg.buf_p_depth // 2
        new_step, pend_store, final, st2_pend, bank = (Signal(name=n) for n in (
            "new_step", "pend_store", "final_pend", "st2_pend", "bank"))
        st = Signal(store_layout())
        st2 = Signal(store2_layout())
        row, pword = Signal(_W, name="row"), Signal(_W, name="pword")
        p_half = Signal()                        # the P half the current step accumulates in
        m.d.comb += [self.bank.eq(bank ^ self.hold),
                     self.p_base.eq(Mux(self.double & p_half, half, 0))]

        with m.If(self.new_step):
            m.d.sync += new_step.eq(1)
        with m.If(self.final_save):
            m.d.sync += final.eq(1)
        with m.If(self.save):
            m.d.sync += [pend_store.eq(1), st.eq(self.save_step)]
        with m.If(self.save2):
            m.d.sync += [st2_pend.eq(1), st2.eq(self.save2_step)]
        with m.If(self.layer_start):
            m.d.sync += [bank.eq(0), pend_store.eq(0), final.eq(0), st2_pend.eq(0),
                         new_step.eq(0), p_half.eq(0)]

        fail_code = Signal(8)
        store_fail = Signal()                    # the store machine's failure, for the FSM
        kick, kick_half, store_idle = self._store_machine(
            m, st, st2, st2_pend, pend_store, row, pword, store_fail, fail_code)
        self._step_machine(m, new_step, pend_store, bank, p_half, kick, kick_half, store_idle,
                           store_fail, fail_code)
        return m

    def _fail(self, m, code):
        """End the layer with ``fail`` and ``fail_code`` = ``code``."""
        m.d.comb += [self.fail.eq(1), self.fail_code.eq(code)]
        m.next = "IDLE"

    def _store_machine(self, m, st, st2, st2_pend, pend_store, row, pword, store_fail,
                       fail_code):
        """The store machine: a finished step's P rows through the DMA, in the background
        with a double-buffered P (the next step accumulates in the other half). Sets
        ``store_fail`` and ``fail_code`` on a DMA error; returns ``kick`` and ``kick_half``
        (start storing the saved step, from that P half: registers the step machine sets) and
        ``store_idle``."""
        cfg = self.config
        half = cfg.buf_p_depth // 2
        # a failed layer stores nothing more (a chunk on the bus ends, no further one starts)
        aborted = Signal()
        with m.If(self.fail | self.abort):
            m.d.sync += aborted.eq(1)
        with m.If(self.layer_start):
            m.d.sync += aborted.eq(0)
        # start storing the saved step: a register, set by the step machine as it leaves FLUSH
        # (the store starts a cycle later; the program saves its next step only after the next
        # RUN, two cycles on at the earliest), with the P half that step accumulated in
        kick, kick_half = Signal(), Signal()
        m.d.sync += kick.eq(0)
        store_idle = Signal()
        cur, cur2, cur2_pend = Signal(store_layout()), Signal(store2_layout()), Signal()
        # the current chunk
        caddr, cword, left = Signal(33, name="caddr"), Signal(_W, name="cword"), Signal(
            _W, name="left")
        # the row's and the step's end, from registers: ``left`` and ``row`` change only on
        # the way into S_STORE (which lasts a cycle at least) or in S_STEP, so these hold the
        # current chunk's and row's by S_WAIT and S_STEP (no 48-bit carry chain before the
        # next state and its registers' enables)
        more_chunks, more_rows = Signal(name="more_chunks"), Signal(name="more_rows")
        acc_shift = exact_log2(element_bytes(cfg.result_width))
        op_shift = exact_log2(element_bytes(cfg.operand_width))
        cmd = self.dma_cmd
        m.d.sync += [more_chunks.eq(left > STORE_CHUNK * cfg.cols),
                     more_rows.eq(row + 1 < cur.rows)]
        with m.FSM(name="store"):
            with m.State("S_IDLE"):
                m.d.comb += store_idle.eq(1)
                with m.If(kick):                  # its own copy: the program saves the next
                    base = Mux(self.double & kick_half, half, 0)           # step meanwhile
                    m.d.sync += [row.eq(0), cur.eq(st), cur2.eq(st2),
                                 cur2_pend.eq(st2_pend), st2_pend.eq(0),
                                 pword.eq(base), cword.eq(base), caddr.eq(st.addr),
                                 left.eq(st.length), pend_store.eq(0)]
                    m.next = "S_STORE"
            # the stored step's rows: st.rows rows of st.length elements, st.stride bytes
            # apart in memory, st.nb words apart in P
            # a row goes out in chunks of at most STORE_CHUNK words, so that loads (which
            # take the DMA first) wait for a chunk, not a whole row
            chunk = STORE_CHUNK * cfg.cols
            n_now = Mux(left > chunk, chunk, left)
            with m.State("S_STORE"):
                stop = aborted | self.layer_start
                m.d.comb += [self.storing.eq(~stop), self.dma_valid.eq(~stop),
                             cmd.direction.eq(Direction.STORE),
                             cmd.kind.eq(Mux(self.requant, ElementKind.OPERAND,
                                             ElementKind.ACCUMULATOR)),
                             cmd.addr.eq(caddr),
                             cmd.buf_addr.eq(cword), cmd.length.eq(n_now),
                             cmd.lanes.eq(cfg.cols)]
                with m.If(stop):
                    m.next = "S_IDLE"
                with m.Elif(self.dma_ready):
                    m.next = "S_WAIT"
            with m.State("S_WAIT"):
                m.d.comb += self.storing.eq(1)
                with m.If(self.layer_start):      # a new layer: the old command is forgotten
                    m.next = "S_IDLE"
                with m.Elif(self.dma_done & aborted):
                    m.next = "S_IDLE"
                with m.Elif(self.dma_done):
                    with m.If(self.dma_error != DmaError.NONE):
                        m.d.sync += [store_fail.eq(1),
                                     fail_code.eq(ERROR_DMA_BUS | self.dma_error.as_value())]
                        m.next = "S_IDLE"
                    with m.Elif(more_chunks):     # the row's next chunk
                        m.d.sync += [left.eq(left - chunk), cword.eq(cword + STORE_CHUNK),
                                     caddr.eq(caddr + Mux(self.requant, chunk << op_shift,
                                                          chunk << acc_shift))]
                        m.next = "S_STORE"
                    with m.Else():
                        m.next = "S_STEP"
            with m.State("S_STEP"):
                with m.If(aborted):
                    m.next = "S_IDLE"
                with m.Else():
                    m.d.sync += [cur.addr.eq(cur.addr + cur.stride), pword.eq(pword + cur.nb),
                                 cword.eq(pword + cur.nb), caddr.eq(cur.addr + cur.stride),
                                 left.eq(cur.length), row.eq(row + 1)]
                    with m.If(more_rows):
                        m.next = "S_STORE"
                    with m.Elif(cur2_pend):           # FC: then the dW rows
                        m.d.sync += [cur2_pend.eq(0), cur.addr.eq(cur2.addr),
                                     caddr.eq(cur2.addr), cur.rows.eq(cur2.rows), row.eq(0),
                                     pword.eq(cur2.p0), cword.eq(cur2.p0)]
                        m.next = "S_STORE"
                    with m.Else():
                        m.next = "S_IDLE"
        return kick, kick_half, store_idle

    def _step_machine(self, m, new_step, pend_store, bank, p_half, kick, kick_half, store_idle,
                      store_fail, fail_code):
        """The step machine: a run waits for the engine's previous run; a new step (or the
        layer's last) first waits for the accumulations, kicks the saved step's store and
        clears P; ``finished`` once the last store is done."""
        # the engine's error is this layer's only once this layer has started a run (a failed
        # layer may leave its engine flagging the run it started last)
        ran = Signal()
        # the engine's start from a register (set on the way into RUN, so high in RUN's
        # cycle exactly, as a decode of the state would be): it fans out to every engine's
        # descriptor registers
        go = Signal()
        m.d.comb += self.eng_start.eq(go)
        with m.If(self.layer_start):
            m.d.sync += [store_fail.eq(0), ran.eq(0)]

        with m.FSM(name="step"):
            with m.State("IDLE"):                # the engine's previous run has ended?
                with m.If(store_fail):
                    self._fail(m, fail_code)
                with m.Elif((self.run | self.last) & ~self.eng_busy):
                    with m.If(self.eng_error & ran):
                        self._fail(m, ERROR_ENGINE | self.eng_code)
                    with m.Elif(self.last | new_step):
                        m.next = "FLUSH"
                    with m.Else():
                        m.d.sync += go.eq(1)
                        m.next = "RUN"
            with m.State("FLUSH"):               # the accumulations have landed, and the
                with m.If(store_fail):           # store before has read its half
                    self._fail(m, fail_code)
                with m.Elif(~self.p_busy & store_idle):
                    m.d.sync += [kick.eq(pend_store), kick_half.eq(p_half)]
                    with m.If(self.last):
                        m.next = "DRAIN"
                    with m.Elif(self.double):     # the store runs on; the next step uses
                        m.d.sync += p_half.eq(~p_half)       # the other half
                        m.next = "CLEAR"
                    with m.Else():
                        m.next = "WAIT_STORE"
            with m.State("WAIT_STORE"):          # P has one copy: the store first
                with m.If(store_fail):
                    self._fail(m, fail_code)
                with m.Elif(store_idle & ~kick):
                    m.next = "CLEAR"
            with m.State("CLEAR"):
                m.d.comb += [self.p_clear.eq(1), self.p_clear_words.eq(self.clear_words)]
                with m.If(self.p_clear_last):
                    m.d.sync += go.eq(1)
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += self.started.eq(1)
                m.d.sync += [bank.eq(bank ^ ~self.hold), new_step.eq(0), ran.eq(1),
                             go.eq(0)]
                m.next = "IDLE"
            with m.State("DRAIN"):               # the layer's last store
                with m.If(store_fail):
                    self._fail(m, fail_code)
                with m.Elif(store_idle & ~kick):
                    m.d.comb += self.finished.eq(1)
                    m.next = "IDLE"
