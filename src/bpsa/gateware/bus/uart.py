"""UART receiver and transmitter: 8 data bits, no parity, 1 stop bit (8N1), LSB first.

The bit time is ``divisor`` clock cycles, ``divisor = round(clk_freq / baud)``
(:func:`uart_divisor`); the receiver samples each bit in its middle, so the host's baud rate may
differ from ``clk_freq / divisor`` by a few per cent (one half bit over the 9.5 bits up to the
stop bit's middle: about 5 %).

:class:`UartRx` synchronizes ``rx`` with two flip-flops, waits for a falling edge, checks that
the line is still low half a bit later (a glitch shorter than that is ignored), samples the
eight data bits and the stop bit and offers the byte on its ``o`` stream. A low stop bit is a
framing error: the byte is dropped and ``frame_error`` pulses; the receiver then waits for the
line to return high (a break is one error, not a stream of zero bytes). A byte arriving while
the previous one has not been taken replaces it and ``overrun`` pulses.

:class:`UartTx` takes a byte from its ``i`` stream whenever it is idle and shifts out start
bit, data and stop bit; ``tx`` idles high.
"""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import stream
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

from bpsa.gateware.common.checked import CheckedComponent

__all__ = ["BAUD_RANGE", "CLK_RANGE", "MIN_DIVISOR", "UartRx", "UartTx", "check_divisor",
           "uart_divisor"]

#: Allowed clock frequencies (Hz).
CLK_RANGE = (1_000, 1_000_000_000)
#: Allowed baud rates.
BAUD_RANGE = (300, 12_000_000)
#: Smallest bit time in clock cycles (the receiver needs a middle to sample).
MIN_DIVISOR = 4
#: Largest bit time in clock cycles.
MAX_DIVISOR = 1 << 24


def _check_number(name, value, lo, hi):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ValueError(f"{name} must be a number in [{lo}, {hi}], not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], not {value!r}")


def check_divisor(divisor):
    if isinstance(divisor, bool) or not isinstance(divisor, int) \
            or not MIN_DIVISOR <= divisor <= MAX_DIVISOR:
        raise ValueError(f"divisor must be an integer in [{MIN_DIVISOR}, {MAX_DIVISOR}], "
                         f"not {divisor!r}")
    return divisor


def uart_divisor(clk_freq, baud):
    """Clock cycles per bit for ``baud`` at ``clk_freq`` Hz: ``round(clk_freq / baud)``.

    Raises ``ValueError`` naming the parameter, its value and the allowed range when
    ``clk_freq`` or ``baud`` is out of range, when the divisor would be below
    :data:`MIN_DIVISOR`, or when the rounded divisor misses the baud rate by more than 2 %."""
    _check_number("clk_freq", clk_freq, *CLK_RANGE)
    _check_number("baud", baud, *BAUD_RANGE)
    divisor = round(clk_freq / baud)
    if divisor < MIN_DIVISOR:
        raise ValueError(f"baud must be in [{BAUD_RANGE[0]}, {int(clk_freq // MIN_DIVISOR)}] "
                         f"at clk_freq {clk_freq} Hz (at least {MIN_DIVISOR} cycles per bit), "
                         f"not {baud!r}")
    if divisor > MAX_DIVISOR:
        raise ValueError(f"baud must be at least {clk_freq / MAX_DIVISOR:.1f} at clk_freq "
                         f"{clk_freq} Hz (at most {MAX_DIVISOR} cycles per bit), not {baud!r}")
    error = abs(clk_freq / divisor - baud) / baud
    if error > 0.02:
        raise ValueError(f"baud {baud!r} is {100 * error:.1f} % off the nearest rate "
                         f"{clk_freq / divisor:.0f} at clk_freq {clk_freq} Hz; the error must "
                         f"be in [0, 2] %")
    return divisor


class UartTx(CheckedComponent):
    """8N1 transmitter.

    Members
    -------
    i : In(stream.Signature(8))
        Bytes to send; ``ready`` while idle.
    tx : Out(1)
        The serial line (idle high).
    busy : Out(1)
        A byte is being shifted out.
    """

    @classmethod
    def check_parameters(cls, divisor):
        check_divisor(divisor)

    def __init__(self, divisor):
        self.divisor = divisor
        super().__init__({
            "i": In(stream.Signature(8)),
            "tx": Out(1, init=1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        shreg = Signal(10, init=0x3FF)        # stop, data[7:0], start; shifted out LSB first
        bits = Signal(range(11))              # bits still to send
        timer = Signal(range(self.divisor))
        m.d.comb += [self.tx.eq(shreg[0]), self.busy.eq(bits != 0),
                     self.i.ready.eq(bits == 0)]
        with m.If(bits == 0):
            with m.If(self.i.valid):
                m.d.sync += [shreg.eq(Cat(0, self.i.payload, 1)), bits.eq(10),
                             timer.eq(self.divisor - 1)]
        with m.Elif(timer == 0):
            m.d.sync += [shreg.eq(Cat(shreg[1:], 1)), bits.eq(bits - 1),
                         timer.eq(self.divisor - 1)]
        with m.Else():
            m.d.sync += timer.eq(timer - 1)
        return m


class UartRx(CheckedComponent):
    """8N1 receiver.

    Members
    -------
    rx : In(1)
        The serial line (asynchronous; synchronized inside; idle high).
    o : Out(stream.Signature(8))
        Received bytes. ``valid`` stays high until the byte is taken.
    frame_error : Out(1)
        One-cycle pulse: a byte ended with a low stop bit (the byte is dropped).
    overrun : Out(1)
        One-cycle pulse: a byte arrived before the previous one was taken (it replaces it).
    """

    @classmethod
    def check_parameters(cls, divisor):
        check_divisor(divisor)

    def __init__(self, divisor):
        self.divisor = divisor
        super().__init__({
            "rx": In(1, init=1),
            "o": Out(stream.Signature(8)),
            "frame_error": Out(1),
            "overrun": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        div = self.divisor
        rx = Signal(init=1)
        m.submodules.sync = FFSynchronizer(self.rx, rx, init=1)

        timer = Signal(range(div))
        shreg = Signal(8)
        bit = Signal(range(9))
        valid = Signal()
        data = Signal(8)
        m.d.comb += [self.o.valid.eq(valid), self.o.payload.eq(data)]
        with m.If(self.o.ready):
            m.d.sync += valid.eq(0)
        m.d.sync += [self.frame_error.eq(0), self.overrun.eq(0)]

        with m.FSM():
            with m.State("IDLE"):
                with m.If(~rx):
                    m.d.sync += timer.eq(div // 2 - 1)
                    m.next = "START"
            with m.State("START"):
                with m.If(timer == 0):
                    with m.If(rx):
                        m.next = "IDLE"                 # a glitch, not a start bit
                    with m.Else():
                        m.d.sync += [timer.eq(div - 1), bit.eq(0)]
                        m.next = "DATA"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
            with m.State("DATA"):
                with m.If(timer == 0):
                    m.d.sync += [shreg.eq(Cat(shreg[1:], rx)), bit.eq(bit + 1),
                                 timer.eq(div - 1)]
                    with m.If(bit == 7):
                        m.next = "STOP"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
            with m.State("STOP"):
                with m.If(timer == 0):
                    with m.If(rx):
                        m.d.sync += [valid.eq(1), data.eq(shreg),
                                     self.overrun.eq(valid & ~self.o.ready)]
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += self.frame_error.eq(1)
                        m.next = "BREAK"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
            with m.State("BREAK"):
                with m.If(rx):
                    m.next = "IDLE"
        return m
