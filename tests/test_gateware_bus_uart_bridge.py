"""The UART bridge protocol: the host transport (``bpsa.host.serial_transport.SerialTransport``)
against an independent Python model of the device written from the protocol table in
``bpsa.gateware.bus.uart_bridge``; parameter errors; and the generated Verilog under Verilator through a
simulated serial line (``src/bpsa/sim/testbenches/tb_uart_bridge.py``)."""

import gc
import random
import warnings

import pytest
from amaranth.hdl import UnusedElaboratable

from bpsa.gateware.bus.uart_bridge import UartBridge, UartBridgeCore
from bpsa.host import serial_transport
from bpsa.host.serial_transport import BridgeError, SerialTransport


class DeviceModel:
    """A serial port whose far end is a model of the bridge: registers (``regs``, SLVERR for
    ``bad_regs``), a memory of ``mem_words`` words; bytes written are parsed as commands, the
    answers queued for ``read``."""

    ARGS = {0: 0, 1: 4, 2: 8, 3: 6, 4: 6}

    def __init__(self, mem_words=256, seed=1):
        rng = random.Random(seed)
        self.mem = bytearray(rng.getrandbits(8) for _ in range(8 * mem_words))
        self.regs = {}
        self.bad_regs = {0xF00}
        self.inbuf = bytearray()
        self.out = bytearray()
        self.commands = []

    # the pyserial subset the transport uses
    def write(self, data):
        self.inbuf += data
        self._parse()

    def read(self, n):
        data, self.out[:] = bytes(self.out[:n]), self.out[n:]
        return data

    def flush(self):
        pass

    def reset_input_buffer(self):
        self.out.clear()

    def close(self):
        pass

    def _parse(self):
        while self.inbuf:
            cmd = self.inbuf[0]
            if cmd not in self.ARGS:
                self.out.append(0xA3)
                del self.inbuf[0]
                continue
            need = 1 + self.ARGS[cmd]
            if len(self.inbuf) < need:
                return
            addr = int.from_bytes(self.inbuf[1:5], "little")
            if cmd == 4:
                count = int.from_bytes(self.inbuf[5:7], "little")
                need += 8 * count
                if len(self.inbuf) < need:
                    return
            args = bytes(self.inbuf[1:need])
            del self.inbuf[:need]
            self.commands.append(cmd)
            self._execute(cmd, addr, args)

    def _execute(self, cmd, addr, args):
        if cmd == 0:
            self.out.append(0xA0)
        elif cmd in (1, 2):
            if addr % 4 or addr >= 4096:
                self.out.append(0xA4)
            elif addr in self.bad_regs:
                self.out.append(0xA1)
            elif cmd == 1:
                self.out += bytes([0xA0]) + self.regs.get(addr, 0).to_bytes(4, "little")
            else:
                self.regs[addr] = int.from_bytes(args[4:8], "little")
                self.out.append(0xA0)
        else:
            count = int.from_bytes(args[4:6], "little")
            if addr % 8 or addr + 8 * count > len(self.mem):
                self.out.append(0xA4)
            elif cmd == 3:
                self.out += bytes([0xA0]) + self.mem[addr:addr + 8 * count]
            else:
                self.mem[addr:addr + 8 * count] = args[6:]
                self.out.append(0xA0)


def test_transport_against_model(monkeypatch):
    monkeypatch.setattr(serial_transport, "CHUNK_WORDS", 5)     # exercise chunking
    dev = DeviceModel()
    t = SerialTransport(dev)
    model = bytearray(dev.mem)
    rng = random.Random(2)
    t.write32(0x40, 0xDEADBEEF)
    assert t.read32(0x40) == 0xDEADBEEF and dev.regs[0x40] == 0xDEADBEEF
    for _ in range(40):
        addr = rng.randrange(len(model) - 1)
        n = rng.randint(0, min(100, len(model) - addr))
        data = bytes(rng.getrandbits(8) for _ in range(n))
        t.write_mem(addr, data)
        model[addr:addr + n] = data
        assert dev.mem == model, (addr, n)
        a = rng.randrange(len(model))
        m = rng.randint(0, len(model) - a)
        assert t.read_mem(a, m) == bytes(model[a:a + m])
    with pytest.raises(BridgeError, match="SLVERR") as e:
        t.read32(0xF00)
    assert e.value.status.name == "SLVERR"
    with pytest.raises(BridgeError, match="BAD_ARG"):
        t.read_mem(len(model) - 4, 8)
    with pytest.raises(ValueError, match=r"addr must be an integer in \[0, 0xFFFFFFFF\]"):
        t.read32(-4)
    with pytest.raises(ValueError, match=r"value must be an integer"):
        t.write32(0, 1 << 32)


def test_transport_sees_garbage_and_timeouts():
    dev = DeviceModel()
    t = SerialTransport(dev)
    dev.out += b"\x17"                          # a stray byte where a status belongs
    with pytest.raises(BridgeError, match="expected a status byte, got 0x17"):
        t.read32(0)
    dev.out.clear()
    dev.write(b"\x00")                          # the answer to a SYNC nobody read
    t.resync()                                  # discards it and syncs
    assert t.read32(0) == 0
    dev.read = lambda n: b""                    # the device went silent
    with pytest.raises(BridgeError, match="timeout: 0 of 1 bytes"):
        t.write32(0, 0)


def test_parameters():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match=r"mem_addr_width must be an integer in \[1, 29\]"):
            UartBridgeCore(mem_addr_width=0)
        with pytest.raises(ValueError, match=r"timeout must be an integer in \[16, "):
            UartBridgeCore(mem_addr_width=8, timeout=3)
        with pytest.raises(ValueError, match=r"divisor must be an integer in \[4, "):
            UartBridge(divisor=1, mem_addr_width=8)
        gc.collect()


@pytest.mark.cocotb
def test_uart_bridge_verilator():
    """Registers, memory and bad commands over the simulated serial line (sim/tb_uart_bridge)."""
    from bpsa.config import load_config
    from bpsa.platform.board_tops import register_tops
    from bpsa.sim.runner import run_cocotb
    register_tops()
    tests, failures = run_cocotb(load_config("small"), "bpsa.sim.testbenches.tb_uart_bridge",
                                 top="uart_bridge")
    assert tests == 3 and failures == 0
