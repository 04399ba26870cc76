"""The step scheduler: engine runs, and between the steps of a layer the P buffer's store and
clear, in the order results need.

A layer is a sequence of *steps*; a step is one or more engine runs (groups) whose results add
up in P. The loop walker of the phase loads a group's operands, then asks for a run (``run``);
when the group starts a new step (``new_step``), the scheduler first waits for the previous
run's accumulations to land (FLUSH), stores the finished step's P rows through the DMA when
one is pending (STORE), clears P for the new step (CLEAR), then starts the engine (RUN) and
toggles the bank. The walker tells it what a step's store needs as soon as the step's last
group has started (``save``), so the next step's first loads overlap that run; ``last`` (the
layer's last step) waits for the last run and stores it.
"""

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from bpsa.config import Config
from bpsa.gateware.dma import DmaError, Direction, ElementKind
from bpsa.gateware.controller.load_unit import dma_command_layout
from bpsa.spec.errors import ERROR_DMA_BUS, ERROR_ENGINE

__all__ = ["StepScheduler", "store_layout"]

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
    run : In(1)
        The walker waits for its loaded group to run; ``started`` pulses when the engine
        starts it.
    last : In(1)
        The walker's layer is done: wait for the last run and store the last step;
        ``finished`` pulses when the store is done.
    new_step, final : In(1)
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
        The buffer half of the next load and run.
    eng_start : Out(1), eng_busy, eng_error : In(1), eng_code : In(4)
        The engine of the layer's phase.
    p_clear : Out(1), p_clear_words : Out(48), p_clear_last : In(1), p_busy : In(1)
        The P buffer's clear pass and accumulate pipeline.
    storing : Out(1)
        A store runs (P's read port serves the DMA).
    dma_valid : Out(1), dma_cmd : Out(DMA command), dma_ready, dma_done : In(1),
    dma_error : In(DmaError)
    """

    def __init__(self, config):
        if not isinstance(config, Config):
            raise TypeError(f"config must be a Config, not {config!r}")
        self.config = config
        super().__init__({
            "layer_start": In(1), "run": In(1), "last": In(1), "new_step": In(1),
            "final": In(1), "save": In(1), "save_step": In(store_layout()),
            "save2": In(1), "save2_step": In(store2_layout()), "clear_words": In(_W),
            "started": Out(1), "finished": Out(1), "fail": Out(1), "fail_code": Out(8),
            "bank": Out(1),
            "eng_start": Out(1), "eng_busy": In(1), "eng_error": In(1), "eng_code": In(4),
            "p_clear": Out(1), "p_clear_words": Out(_W), "p_clear_last": In(1),
            "p_busy": In(1), "storing": Out(1),
            "dma_valid": Out(1), "dma_cmd": Out(dma_command_layout(config)),
            "dma_ready": In(1), "dma_done": In(1), "dma_error": In(DmaError),
        })

    def elaborate(self, platform):
        m = Module()
        new_step, pend_store, final, st2_pend, bank = (Signal(name=n) for n in (
            "new_step", "pend_store", "final", "st2_pend", "bank"))
        st = Signal(store_layout())
        st2 = Signal(store2_layout())
        row, pword = Signal(_W), Signal(_W)
        m.d.comb += self.bank.eq(bank)

        with m.If(self.new_step):
            m.d.sync += new_step.eq(1)
        with m.If(self.final):
            m.d.sync += final.eq(1)
        with m.If(self.save):
            m.d.sync += [pend_store.eq(1), st.eq(self.save_step)]
        with m.If(self.save2):
            m.d.sync += [st2_pend.eq(1), st2.eq(self.save2_step)]
        with m.If(self.layer_start):
            m.d.sync += [bank.eq(0), pend_store.eq(0), final.eq(0), st2_pend.eq(0),
                         new_step.eq(0)]

        def fail(code):
            m.d.comb += [self.fail.eq(1), self.fail_code.eq(code)]
            m.next = "IDLE"

        cmd = self.dma_cmd
        with m.FSM(name="step"):
            with m.State("IDLE"):                # the engine's previous run has ended?
                with m.If((self.run | self.last) & ~self.eng_busy):
                    with m.If(self.eng_error):
                        fail(ERROR_ENGINE | self.eng_code)
                    with m.Elif(self.last | new_step):
                        m.next = "FLUSH"
                    with m.Else():
                        m.next = "RUN"
            with m.State("FLUSH"):               # the accumulations have landed
                with m.If(~self.p_busy):
                    m.d.sync += [row.eq(0), pword.eq(0)]
                    with m.If(pend_store):
                        m.next = "STORE"
                    with m.Else():
                        m.next = "CLEAR"
            with m.State("CLEAR"):
                m.d.comb += [self.p_clear.eq(1), self.p_clear_words.eq(self.clear_words)]
                with m.If(self.p_clear_last):
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += [self.eng_start.eq(1), self.started.eq(1)]
                m.d.sync += [bank.eq(~bank), new_step.eq(0)]
                m.next = "IDLE"
            # the stored step's rows: st.rows rows of st.length elements, st.stride bytes
            # apart in memory, st.nb words apart in P
            with m.State("STORE"):
                m.d.comb += [self.storing.eq(1), self.dma_valid.eq(1),
                             cmd.direction.eq(Direction.STORE),
                             cmd.kind.eq(ElementKind.ACCUMULATOR), cmd.addr.eq(st.addr),
                             cmd.buf_addr.eq(pword), cmd.length.eq(st.length),
                             cmd.lanes.eq(self.config.cols)]
                with m.If(self.dma_ready):
                    m.next = "STORE_WAIT"
            with m.State("STORE_WAIT"):
                m.d.comb += self.storing.eq(1)
                with m.If(self.dma_done):
                    with m.If(self.dma_error != DmaError.NONE):
                        fail(ERROR_DMA_BUS | self.dma_error.as_value())
                    with m.Else():
                        m.next = "STORE_STEP"
            with m.State("STORE_STEP"):
                m.d.sync += [st.addr.eq(st.addr + st.stride), pword.eq(pword + st.nb),
                             row.eq(row + 1)]
                with m.If(row + 1 < st.rows):
                    m.next = "STORE"
                with m.Elif(st2_pend):            # FC: then the dW rows
                    m.d.sync += [st2_pend.eq(0), st.addr.eq(st2.addr), st.rows.eq(st2.rows),
                                 row.eq(0), pword.eq(st2.p0)]
                    m.next = "STORE"
                with m.Elif(final):
                    m.d.comb += self.finished.eq(1)
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += pend_store.eq(0)
                    m.next = "CLEAR"
        return m
