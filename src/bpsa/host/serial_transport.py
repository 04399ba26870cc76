"""Host side of the UART bridge protocol (``bpsa.gateware.bus.uart_bridge``): a pyserial transport for
the board and a simulated serial line for cocotb, running the same protocol code.

Every transport has four methods, the interface of the host driver:

    read32(addr) -> int                  32-bit register read
    write32(addr, value)                 32-bit register write
    read_mem(addr, nbytes) -> bytes      on-chip memory read
    write_mem(addr, data)                on-chip memory write

:class:`SerialTransport` offers them as plain methods (pyserial), :class:`AsyncTransport`
as ``async def`` methods of the same names over any asynchronous byte link (the cocotb
:class:`SimSerialLine`, or :class:`ThreadedLink`, which runs a pyserial port in a worker thread
so the asynchronous driver runs on the board too).

The protocol is written once, as generators (:func:`op_read32` ...) that yield
``("write", bytes)`` and ``("read", n)`` requests and receive the bytes read; the transports only
move bytes. Memory accesses of any address and length are split into aligned commands of at
most :data:`CHUNK_WORDS` words; partial words at either end are read, merged and written back.
A status byte other than OK raises :class:`BridgeError` (with the :class:`Status`).
"""

import asyncio

from bpsa.spec.bridge import STATUS_BASE, Command, Status

__all__ = ["AsyncTransport", "BridgeError", "CHUNK_WORDS", "SerialTransport", "SimSerialLine",
           "ThreadedLink", "op_read32", "op_read_mem", "op_sync", "op_write32", "op_write_mem"]

#: Words per memory command (the protocol allows 65535; smaller chunks bound the time a
#: failing command takes to be noticed).
CHUNK_WORDS = 512


class BridgeError(IOError):
    """The device answered a status other than OK, or something other than a status byte."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


def _u32(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 32:
        raise ValueError(f"{name} must be an integer in [0, 0xFFFFFFFF], not {value!r}")
    return value


def _status(op, b):
    """Check one status byte; raise BridgeError unless it is OK."""
    (b,) = b
    if b & 0xF0 != STATUS_BASE or (b & 0xF) not in [s.value for s in Status]:
        raise BridgeError(f"{op}: expected a status byte, got 0x{b:02x}")
    status = Status(b & 0xF)
    if status != Status.OK:
        raise BridgeError(f"{op}: device answered {status.name}", status)


def op_sync():
    """SYNC: the device answers OK."""
    yield "write", bytes([Command.SYNC.value])
    _status("sync", (yield "read", 1))


def op_read32(addr):
    _u32("addr", addr)
    yield "write", bytes([Command.READ32.value]) + addr.to_bytes(4, "little")
    _status(f"read32(0x{addr:x})", (yield "read", 1))
    return int.from_bytes((yield "read", 4), "little")


def op_write32(addr, value):
    _u32("addr", addr)
    _u32("value", value)
    yield "write", (bytes([Command.WRITE32.value]) + addr.to_bytes(4, "little")
                    + value.to_bytes(4, "little"))
    _status(f"write32(0x{addr:x})", (yield "read", 1))


def _mem_read_words(addr, words):
    """Aligned read of ``words`` 64-bit words in chunks."""
    out = bytearray()
    while words:
        n = min(words, CHUNK_WORDS)
        yield "write", (bytes([Command.MEM_READ.value]) + addr.to_bytes(4, "little")
                        + n.to_bytes(2, "little"))
        _status(f"read_mem(0x{addr:x}, {8 * n})", (yield "read", 1))
        out += yield "read", 8 * n
        addr += 8 * n
        words -= n
    return bytes(out)


def _mem_write_words(addr, data):
    """Aligned write of whole words in chunks."""
    for i in range(0, len(data), 8 * CHUNK_WORDS):
        chunk = data[i:i + 8 * CHUNK_WORDS]
        yield "write", (bytes([Command.MEM_WRITE.value]) + (addr + i).to_bytes(4, "little")
                        + (len(chunk) // 8).to_bytes(2, "little") + bytes(chunk))
        _status(f"write_mem(0x{addr + i:x}, {len(chunk)})", (yield "read", 1))


def _span(addr, nbytes):
    _u32("addr", addr)
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0 \
            or addr + nbytes > 1 << 32:
        raise ValueError(f"nbytes must be an integer in [0, {(1 << 32) - addr}], "
                         f"not {nbytes!r}")
    lo = addr & ~7
    hi = (addr + nbytes + 7) & ~7
    return lo, (hi - lo) // 8


def op_read_mem(addr, nbytes):
    lo, words = _span(addr, nbytes)
    if nbytes == 0:
        return b""
    data = yield from _mem_read_words(lo, words)
    return data[addr - lo:addr - lo + nbytes]


def op_write_mem(addr, data):
    data = bytes(data)
    lo, words = _span(addr, len(data))
    if not data:
        return
    buf = bytearray(8 * words)
    head, tail = addr - lo, 8 * words - (addr - lo + len(data))
    if head:                                        # merge the partial first word
        buf[0:8] = yield from _mem_read_words(lo, 1)
    if tail and (words > 1 or not head):            # and the partial last word
        buf[-8:] = yield from _mem_read_words(lo + 8 * (words - 1), 1)
    buf[head:head + len(data)] = data
    yield from _mem_write_words(lo, bytes(buf))


def _run_sync(gen, link):
    """Run a protocol generator over a blocking link (``write(bytes)``, ``read(n)``)."""
    try:
        req = next(gen)
        while True:
            kind, arg = req
            if kind == "write":
                link.write(arg)
                req = gen.send(None)
            else:
                req = gen.send(link.read(arg))
    except StopIteration as stop:
        return stop.value


async def _run_async(gen, link):
    """Run a protocol generator over an asynchronous link (``async write``, ``async read``)."""
    try:
        req = next(gen)
        while True:
            kind, arg = req
            if kind == "write":
                await link.write(arg)
                req = gen.send(None)
            else:
                req = gen.send(await link.read(arg))
    except StopIteration as stop:
        return stop.value


class _PySerialLink:
    """Blocking byte link over a pyserial port; a short read is a timeout."""

    def __init__(self, port):
        self.port = port

    def write(self, data):
        self.port.write(data)
        self.port.flush()

    def read(self, n):
        data = self.port.read(n)
        if len(data) != n:
            raise BridgeError(f"timeout: {len(data)} of {n} bytes received")
        return bytes(data)


class SerialTransport:
    """The bridge over a serial port (pyserial).

    ``port``: a device name or pyserial URL (``/dev/ttyUSB1``, ``loop://``, ...) or an open
    ``serial.Serial``-like object (``write``, ``read``, ``flush``, ``reset_input_buffer``).
    ``timeout``: seconds to wait for each answer. ``sync=True`` resynchronizes first
    (:meth:`resync`).
    """

    def __init__(self, port, baud=115200, *, timeout=2.0, sync=True):
        if isinstance(port, str):
            import serial
            port = serial.serial_for_url(port, baudrate=baud, timeout=timeout)
        self.port = port
        self.link = _PySerialLink(port)
        if sync:
            self.resync()

    def close(self):
        self.port.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def resync(self, attempts=4):
        """Discard stale input and send SYNC until the device answers OK."""
        for _ in range(attempts):
            if hasattr(self.port, "reset_input_buffer"):
                self.port.reset_input_buffer()
            try:
                _run_sync(op_sync(), self.link)
                return
            except BridgeError:
                pass
        raise BridgeError(f"no answer to SYNC after {attempts} attempts")

    def read32(self, addr):
        return _run_sync(op_read32(addr), self.link)

    def write32(self, addr, value):
        _run_sync(op_write32(addr, value), self.link)

    def read_mem(self, addr, nbytes):
        return _run_sync(op_read_mem(addr, nbytes), self.link)

    def write_mem(self, addr, data):
        _run_sync(op_write_mem(addr, data), self.link)


class AsyncTransport:
    """The bridge over an asynchronous byte link: ``await link.write(bytes)``,
    ``await link.read(n) -> bytes``. Same four methods as :class:`SerialTransport`, as
    ``async def``."""

    def __init__(self, link):
        self.link = link

    async def sync(self):
        await _run_async(op_sync(), self.link)

    async def read32(self, addr):
        return await _run_async(op_read32(addr), self.link)

    async def write32(self, addr, value):
        await _run_async(op_write32(addr, value), self.link)

    async def read_mem(self, addr, nbytes):
        return await _run_async(op_read_mem(addr, nbytes), self.link)

    async def write_mem(self, addr, data):
        await _run_async(op_write_mem(addr, data), self.link)

    async def raw(self, data, nread):
        """Send ``data`` as is and return the next ``nread`` bytes (protocol tests)."""
        await self.link.write(bytes(data))
        return await self.link.read(nread)


class ThreadedLink:
    """An asynchronous link over a blocking pyserial port (each transfer in a worker thread),
    so ``AsyncTransport(ThreadedLink(port))`` drives the board from asyncio code."""

    def __init__(self, port, baud=115200, *, timeout=2.0):
        if isinstance(port, str):
            import serial
            port = serial.serial_for_url(port, baudrate=baud, timeout=timeout)
        self.port = port
        self._link = _PySerialLink(port)

    async def write(self, data):
        await asyncio.to_thread(self._link.write, data)

    async def read(self, n):
        return await asyncio.to_thread(self._link.read, n)


class SimSerialLine:
    """A serial line to a simulated design under cocotb: drives ``rx`` (the design's input)
    and decodes ``tx`` (its output), 8N1 with ``divisor`` clock cycles per bit.

    ``await write(bytes)`` sends the bytes back to back; ``await read(n)`` returns the next
    ``n`` bytes the design sent (raising :class:`BridgeError` after ``timeout_bits`` bit times
    without a byte). A receiver task decodes ``tx`` from construction on.
    """

    def __init__(self, clk, rx, tx, divisor, *, timeout_bits=10_000):
        import cocotb
        self.clk, self.rx, self.tx = clk, rx, tx
        self.divisor = divisor
        self.timeout_bits = timeout_bits
        self.received = []          # bytes decoded, not yet read
        self.frame_errors = 0
        self.rx.value = 1
        self._task = cocotb.start_soon(self._receive())

    async def _bit(self, value):
        from cocotb.triggers import ClockCycles
        self.rx.value = value
        await ClockCycles(self.clk, self.divisor)

    async def write(self, data):
        for b in bytes(data):
            await self._bit(0)
            for i in range(8):
                await self._bit(b >> i & 1)
            await self._bit(1)

    async def _receive(self):
        from cocotb.triggers import ClockCycles, FallingEdge
        while True:
            await FallingEdge(self.tx)
            await ClockCycles(self.clk, self.divisor // 2)
            if int(self.tx.value):
                continue                                     # a glitch
            b = 0
            for i in range(8):
                await ClockCycles(self.clk, self.divisor)
                b |= int(self.tx.value) << i
            await ClockCycles(self.clk, self.divisor)
            if not int(self.tx.value):
                self.frame_errors += 1
                continue
            self.received.append(b)

    async def read(self, n):
        from cocotb.triggers import ClockCycles
        waited, have = 0, len(self.received)
        while len(self.received) < n:
            await ClockCycles(self.clk, self.divisor)
            waited += 1
            if len(self.received) != have:
                waited, have = 0, len(self.received)
            if waited > self.timeout_bits:
                raise BridgeError(f"timeout: {len(self.received)} of {n} bytes received")
        data, self.received[:] = bytes(self.received[:n]), self.received[n:]
        return data

