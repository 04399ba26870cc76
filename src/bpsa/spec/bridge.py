"""The UART bridge's byte protocol: command bytes, argument lengths and status bytes.

The gateware (:mod:`bpsa.gateware.bus.uart_bridge`) and the host's serial transport
(:mod:`bpsa.host.serial_transport`) both read these definitions.

Protocol
========

The host sends a command byte and its argument bytes; the device answers every command with
exactly one *status byte*, followed, for a successful read, by the data. Multi-byte fields are
little endian.

==========  ====  =======================================  ===================================
command     byte  host sends after the command byte        device answers
==========  ====  =======================================  ===================================
SYNC        0x00  nothing                                  status OK
READ32      0x01  addr (4)                                 status; if OK, data (4)
WRITE32     0x02  addr (4), data (4)                       status (after the B response)
MEM_READ    0x03  addr (4), count (2)                      status; if OK, count * 8 data bytes
MEM_WRITE   0x04  addr (4), count (2), count * 8 data      status (after the last word is
                                                           written)
==========  ====  =======================================  ===================================

``addr`` of READ32 / WRITE32 is a byte address on the register bus (aligned to 4, below
``2**axil_addr_width``); WRITE32 writes all four bytes. ``addr`` of MEM_READ / MEM_WRITE is a
byte address in the on-chip memory, aligned to 8; ``count`` is a number of 64-bit words
(0..65535; 0 does nothing and answers OK), which must lie inside the memory.

Status byte: ``0xA0 | code``, with code

====  ========  ==========================================================================
code  name      meaning
====  ========  ==========================================================================
0     OK
1     SLVERR    the register bus answered SLVERR (READ32: no data follows)
2     DECERR    the register bus answered DECERR
3     BAD_CMD   the command byte is not one of the above (answered at once: every unknown
                byte gets its own status byte, so the device never waits on garbage)
4     BAD_ARG   address unaligned or out of range, or the memory range overflows: nothing
                is accessed (MEM_WRITE still takes its ``count * 8`` data bytes first, so the
                byte stream stays in step)
5     TIMEOUT   the argument or data bytes of a command stopped arriving for ``timeout``
                cycles: the command is dropped and the device waits for a new command byte
====  ========  ==========================================================================

A host that lost track (e.g. after a TIMEOUT) waits longer than the timeout, discards what it
received, and sends SYNC until it reads ``0xA0``. The status byte's high nibble ``0xA`` lets it
tell a status from stray data.
"""

import enum

__all__ = ["ARG_BYTES", "Command", "STATUS_BASE", "Status", "status_byte"]


class Command(enum.IntEnum):
    """Command bytes."""
    SYNC = 0x00
    READ32 = 0x01
    WRITE32 = 0x02
    MEM_READ = 0x03
    MEM_WRITE = 0x04


class Status(enum.IntEnum):
    """Status codes (low nibble of the status byte)."""
    OK = 0
    SLVERR = 1
    DECERR = 2
    BAD_CMD = 3
    BAD_ARG = 4
    TIMEOUT = 5


#: High nibble of every status byte.
STATUS_BASE = 0xA0

#: Argument bytes after each command byte (MEM_WRITE's data bytes not counted).
ARG_BYTES = {Command.SYNC: 0, Command.READ32: 4, Command.WRITE32: 8, Command.MEM_READ: 6,
             Command.MEM_WRITE: 6}


def status_byte(status):
    """The byte the device sends for ``status`` (a :class:`Status` or its code)."""
    return STATUS_BASE | Status(status.value if isinstance(status, enum.Enum) else status)
