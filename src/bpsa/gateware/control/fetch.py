"""The instruction fetch unit: a layer's program from external memory to the dispatcher.

At ``start`` it takes the program's byte address and length in instructions
(:mod:`bpsa.spec.isa`: 64-bit words, little endian, one after the other). It keeps a ring of
:data:`FETCH_DEPTH` instructions in a small memory and refills it half a ring at a time
through the DMA (one load command of at most ``FETCH_DEPTH / 2`` instructions, each in one
buffer word: ``64 / b`` elements of ``b`` bits, ``b`` the operand or accumulator element width
that is a whole number of bytes; or in two buffer words, a half each, when a buffer word is
narrower than an instruction), as soon as half of it has been read; the dispatcher takes
the words in order from ``insn``. ``insn_end`` rises when every word of the program has been
taken. A DMA error while fetching (a program outside the DMA window, a bus error) is
``error`` with the DMA's code; nothing more is handed on.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from bpsa.config import Config
from bpsa.gateware.control.load_unit import dma_command_layout
from bpsa.gateware.bus.dma import DmaError, Direction, ElementKind, default_geometry
from bpsa.spec import isa

__all__ = ["FETCH_DEPTH", "Fetch", "fetch_element"]

#: Instructions the fetch unit holds (two halves, refilled one at a time).
FETCH_DEPTH = 16


def fetch_element(config):
    """``(ElementKind, bits, parts)`` of the DMA elements an instruction is fetched as: the
    operand's when it is a whole number of bytes, else the accumulator's; ``parts``: buffer
    words an instruction takes (1, or 2 halves when a buffer word is narrower than an
    instruction). :exc:`ValueError` when neither width is a whole number of bytes, or a
    buffer word is narrower than half an instruction."""
    word, _ = default_geometry(config)
    for kind, bits in ((ElementKind.OPERAND, config.operand_width),
                       (ElementKind.ACCUMULATOR, config.result_width)):
        if bits in (8, 16, 32, 64):
            break
    else:
        raise ValueError(f"instructions are fetched as whole-byte elements: operand_width "
                         f"{config.operand_width} or acc_width {config.acc_width} must be 8, "
                         f"16, 32 or 64")
    parts = 1 if word >= isa.INSN_BITS else 2
    if word * parts < isa.INSN_BITS or bits > isa.INSN_BITS // parts:
        raise ValueError(f"the DMA's buffer word ({word} bits) must hold half an instruction "
                         f"({isa.INSN_BITS // 2} bits)")
    return kind, bits, parts


class Fetch(wiring.Component):
    """See the module docstring.

    Members
    -------
    start : In(1), prog_addr : In(32), prog_words : In(32)
        A layer starts: its program's byte address and length (instructions).
    dma : Out(stream.Signature(dma_command_layout(config))), dma_done : In(1),
    dma_error : In(DmaError)
        The DMA engine's command port (the top shares it with the load unit and the stores).
    write_addr, write_data, write_en : In
        The DMA's buffer writes while ``fetching``.
    fetching : Out(1)
        A fetch command is in flight: the DMA's buffer writes are this unit's.
    insn : Out(stream.Signature(64)), insn_end : Out(1)
        The program's words; all taken.
    error : Out(1), error_code : Out(DmaError)
        Pulse: a fetch failed.
    stop : In(1)
        The layer has ended (failed): fetch nothing more (a command in flight still ends).
    busy : Out(1)
        A fetch command is offered or in flight (START must wait).
    fetched : Out(32)
        Instructions fetched since ``start``.
    """

    def __init__(self, config):
        if not isinstance(config, Config):
            raise TypeError(f"config must be a Config, not {config!r}")
        self.config = config
        self.kind, self.element_bits, self.parts = fetch_element(config)
        cmd = dma_command_layout(config)
        word, depth = default_geometry(config)
        super().__init__({
            "start": In(1), "prog_addr": In(32), "prog_words": In(32),
            "dma": Out(stream.Signature(cmd)), "dma_done": In(1), "dma_error": In(DmaError),
            "write_addr": In(cmd["buf_addr"].shape), "write_data": In(word),
            "write_en": In(1), "fetching": Out(1),
            "insn": Out(stream.Signature(isa.INSN_BITS)), "insn_end": Out(1),
            "error": Out(1), "error_code": Out(DmaError), "stop": In(1), "busy": Out(1),
            "fetched": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        depth, half = FETCH_DEPTH, FETCH_DEPTH // 2
        parts = self.parts                  # buffer words an instruction
        part = isa.INSN_BITS // parts
        lanes = part // self.element_bits   # elements a buffer word
        mem = m.submodules.ring = Memory(shape=isa.INSN_BITS, depth=depth, init=[])
        wp = mem.write_port(granularity=part)
        rp = mem.read_port(transparent_for=())

        slot = (depth - 1).bit_length()
        addr = Signal(32)                   # the next fetch's byte address
        left = Signal(32)                   # words not yet fetched
        fetched = Signal(32)                # words fetched since start
        held = Signal(range(depth + 1))     # words in the ring not yet read
        wr_slot, rd_slot = Signal(slot), Signal(slot)
        chunk = Signal(range(half + 1))
        out_valid = Signal()
        written = Signal()
        m.d.comb += written.eq(self.write_en & self.fetching)
        if parts == 1:
            m.d.comb += [wp.addr.eq(self.write_addr), wp.data.eq(self.write_data[:part]),
                         wp.en.eq(written)]
        else:                               # the halves of an instruction, low half first
            m.d.comb += [wp.addr.eq(self.write_addr[1:]),
                         wp.data.eq(Cat(self.write_data[:part], self.write_data[:part])),
                         wp.en.eq(Mux(written, Mux(self.write_addr[0], 0b10, 0b01), 0))]

        # read side: a word a cycle into the output, which holds it until taken
        advance, landed = Signal(), Signal()
        m.d.comb += [advance.eq((held != 0) & (~out_valid | self.insn.ready)),
                     rp.addr.eq(rd_slot), rp.en.eq(advance),
                     self.insn.valid.eq(out_valid), self.insn.payload.eq(rp.data)]
        with m.If(advance):
            m.d.sync += [rd_slot.eq(rd_slot + 1), out_valid.eq(1)]
        with m.Elif(self.insn.ready):
            m.d.sync += out_valid.eq(0)
        m.d.sync += held.eq(held + Mux(landed, chunk, 0) - advance)
        m.d.comb += self.insn_end.eq((left == 0) & (held == 0) & ~out_valid)

        # fill side: half a ring once it has been read (and the first two halves at once);
        # counters, no wide comparison
        cmd = self.dma.payload
        reset = [addr.eq(self.prog_addr), left.eq(self.prog_words), fetched.eq(0), held.eq(0),
                 wr_slot.eq(0), rd_slot.eq(0), out_valid.eq(0)]
        with m.FSM(name="fetch") as fsm:
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += reset
                    m.next = "WAIT"
            with m.State("WAIT"):
                with m.If(self.start):
                    m.d.sync += reset
                with m.Elif(self.stop):
                    m.next = "IDLE"
                with m.Elif((left != 0) & (held <= half)):
                    m.d.sync += chunk.eq(Mux(left[(half - 1).bit_length():] != 0, half, left))
                    m.next = "ASK"
            with m.State("ASK"):
                m.d.comb += [self.dma.valid.eq(~self.stop), cmd.direction.eq(Direction.LOAD),
                             cmd.kind.eq(self.kind), cmd.addr.eq(addr),
                             cmd.buf_addr.eq(wr_slot * parts),
                             cmd.length.eq(chunk * (lanes * parts)), cmd.lanes.eq(lanes)]
                with m.If(self.stop):
                    m.next = "IDLE"
                with m.Elif(self.dma.ready):
                    m.next = "FETCH"
            with m.State("FETCH"):
                m.d.comb += self.fetching.eq(1)
                with m.If(self.dma_done):
                    with m.If(self.dma_error != DmaError.NONE):
                        m.d.comb += [self.error.eq(1), self.error_code.eq(self.dma_error)]
                        m.d.sync += [left.eq(0), held.eq(0), out_valid.eq(0)]  # no more
                        m.next = "IDLE"
                    with m.Else():
                        m.d.comb += landed.eq(1)
                        m.d.sync += [addr.eq(addr + (chunk << 3)), left.eq(left - chunk),
                                     fetched.eq(fetched + chunk), wr_slot.eq(wr_slot + chunk)]
                        m.next = "WAIT"
        m.d.comb += [self.busy.eq(fsm.ongoing("ASK") | fsm.ongoing("FETCH")),
                     self.fetched.eq(fetched)]
        return m
