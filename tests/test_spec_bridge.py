"""The UART bridge's protocol bytes."""

from bpsa.spec.bridge import ARG_BYTES, STATUS_BASE, Command, Status, status_byte


def test_status_bytes_have_the_marker_nibble():
    assert [status_byte(s) for s in Status] == [0xA0, 0xA1, 0xA2, 0xA3, 0xA4, 0xA5]
    assert status_byte(4) == STATUS_BASE | Status.BAD_ARG
    assert all(status_byte(s) >> 4 == 0xA for s in Status)


def test_every_command_has_its_argument_length():
    assert set(ARG_BYTES) == set(Command)
    assert ARG_BYTES[Command.WRITE32] == 8 and ARG_BYTES[Command.MEM_WRITE] == 6
