"""The host register interface: an AXI4-Lite slave with layer descriptor, control, status and
performance counters.

The register map is the table :data:`REGISTERS` (one :class:`Register` per 32-bit word); the
hardware decodes it and the host driver reads it, as :data:`REGISTER_MAP` (name -> byte offset)
or as :func:`register_map` (a JSON-ready dict with access, reset values and field
descriptions), so both sides read the same truth.

Register map (byte offsets; all registers 32 bits, accessed as aligned words)
=============  ======  ======  =================================================================
name           offset  access  contents
=============  ======  ======  =================================================================
ID             0x000   RO      ``0x42505341`` ("BPSA")
VERSION        0x004   RO      register-map version, ``major << 16 | minor``
CFG_ARRAY      0x008   RO      rows [7:0], cols [15:8], operand_width [23:16], acc_width [31:24]
CFG_FEATURES   0x00C   RO      dataflows os/ws/is/interleaved [3:0], operand_signed [4],
                               zero_gating [5], reserve_registers [6], dim_width [12:8],
                               log2(feeder_bus_width) [18:16]
CFG_BUFFERS    0x010   RO      log2 of buf_a_depth [4:0], buf_b_depth [12:8], buf_p_depth [20:16]
CONTROL        0x020   WO      START [0], CLEAR [1]; writes act, reads return 0
STATUS         0x024   RO      BUSY [0], DONE [1], ERROR [15:8]
WINDOW_LO      0x028   RW      lowest external byte address the DMA may touch (reset 0)
WINDOW_HI      0x02C   RW      highest such address, inclusive (reset 0xFFFFFFFF)
PHASE .. DIL_W 0x040.. RW      the layer descriptor, one field per register (see below)
ADDR_X ..      0x078.. RW      32-bit external byte addresses of X, W, dY and the output
<counter>_LO   0x100.. RO      low half of 64-bit counter ``i`` at ``0x100 + 8 i``
<counter>_HI   +4      RO      high half (see "Counters")
=============  ======  ======  =================================================================

Descriptor registers, 4 bytes apart from 0x040: PHASE, N, C, H, W, K, R, S, STRIDE_H,
STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, ADDR_X (0x078), ADDR_W, ADDR_DY, ADDR_OUT (0x084).
Counters, 8 bytes apart from 0x100 (:data:`COUNTERS`): CYCLES, BUSY_CYCLES, COMPUTE_CYCLES,
STALL_CYCLES, MACS, GATED_MACS, DMA_READ_BYTES, DMA_WRITE_BYTES, DMA_BUSY_CYCLES,
BUF_A_READS, BUF_A_WRITES, BUF_B_READS, BUF_B_WRITES, BUF_P_READS, BUF_P_WRITES,
OVERLAP_CYCLES (0x178; map version 1.1).

Descriptor registers hold only their field's bits (``dim_width`` bits for shapes, 4 for
PHASE, 32 for addresses): bits above the field are dropped on write and read back as 0, so a
driver detects a value too large for this configuration by reading it back. Reset values:
STRIDE_* and DIL_* are 1, everything else 0.

Control and status
    Writing CONTROL with START = 1 (byte lane 0 enabled) while ``busy`` is low copies the
    descriptor registers to the ``desc`` output and raises ``start`` for one cycle (both in the
    cycle after the write), and clears DONE and ERROR. While ``busy`` is high START is ignored,
    so the host may stage the next descriptor while a layer runs. CLEAR = 1 clears DONE and
    ERROR and raises ``clear`` for one cycle (the counter owners reset their counters on it).
    DONE is set by a ``done`` pulse and stays set; ERROR holds the ``error`` input sampled at
    that pulse. BUSY is the ``busy`` input. WINDOW_LO / WINDOW_HI drive the ``window_lo`` /
    ``window_hi`` outputs directly (not copied at START).

Counters
    ``counters`` (:data:`COUNTERS`, 64 bits each) are read as two halves: reading
    ``<name>_LO`` latches the high half of the same counter, and ``<name>_HI`` read right after
    it returns the latched half, so the pair is one consistent 64-bit sample. A ``_HI`` read
    without a preceding ``_LO`` read of the same counter returns the live high half.

Bus behaviour
    Responses are OKAY except for an address that names no register: reads return 0 with
    SLVERR, writes are dropped with SLVERR. Writes to read-only registers are dropped with
    OKAY. Address bits [1:0] are ignored (word access). ``wstrb`` selects the byte lanes
    written. AWPROT/ARPROT are not ports (the slave would ignore them). One write and one read
    are handled at a time; the two run independently.
"""

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Signal, unsigned
from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from .config import Config

__all__ = [
    "ADDR_WIDTH", "COUNTERS", "DESCRIPTOR_FIELDS", "ID_VALUE", "MAP_VERSION", "REGISTERS",
    "REGISTER_MAP", "CONTROL_BITS", "STATUS_FIELDS", "AxiResp", "Phase", "Register",
    "RegisterFile", "axi_lite_signature",
    "config_words", "counter_layout", "descriptor_layout", "register_map",
]

#: Bits of the register file's byte address (a 4 KiB aperture).
ADDR_WIDTH = 12

#: Value of the ID register: "BPSA" in ASCII.
ID_VALUE = 0x42505341

#: Register-map version (major, minor): a driver refuses a different major version.
MAP_VERSION = (1, 1)


class AxiResp(enum.Enum, shape=2):
    """AXI response codes (BRESP / RRESP)."""
    OKAY = 0
    EXOKAY = 1
    SLVERR = 2
    DECERR = 3


class Phase(enum.Enum, shape=4):
    """The PHASE descriptor field: which pass of a layer to run. Values 4..15 are reserved
    (a controller refuses them)."""
    FORWARD = 0
    LOSS = 1
    GRADIENT = 2
    FC_BACKWARD = 3


def axi_lite_signature(addr_width, data_width=32):
    """An AXI4-Lite bus as seen by the master (flip it for a slave).

    Members use the AXI names in lower case (``awaddr``, ``awvalid``, ``awready``, ``wdata``,
    ``wstrb``, ``wvalid``, ``wready``, ``bresp``, ``bvalid``, ``bready``, ``araddr``,
    ``arvalid``, ``arready``, ``rdata``, ``rresp``, ``rvalid``, ``rready``), so an interface
    member ``axil`` becomes the Verilog ports ``axil__awaddr`` and so on, which cocotbext-axi
    finds with ``AxiLiteBus.from_prefix(dut, "axil", bus_separator="__")``. No PROT signals.
    """
    if not isinstance(addr_width, int) or not 1 <= addr_width <= 64:
        raise TypeError(f"addr_width must be an integer in [1, 64], not {addr_width!r}")
    if data_width not in (32, 64):
        raise TypeError(f"data_width must be 32 or 64, not {data_width!r}")
    return wiring.Signature({
        "awaddr": Out(addr_width), "awvalid": Out(1), "awready": In(1),
        "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wvalid": Out(1),
        "wready": In(1),
        "bresp": In(AxiResp), "bvalid": In(1), "bready": Out(1),
        "araddr": Out(addr_width), "arvalid": Out(1), "arready": In(1),
        "rdata": In(data_width), "rresp": In(AxiResp), "rvalid": In(1), "rready": Out(1),
    })


# --- the register table -----------------------------------------------------------------------

#: Descriptor fields in register order: (field name, register name, width kind, reset, doc).
#: Width kind ``"dim"`` is ``dim_width`` bits, ``"phase"`` 4 bits, ``"addr"`` 32 bits.
DESCRIPTOR_FIELDS = (
    ("phase", "PHASE", "phase", 0, "Phase: 0 forward, 1 loss, 2 gradient, 3 FC backward"),
    ("n", "N", "dim", 0, "batch N"),
    ("c", "C", "dim", 0, "input channels C"),
    ("h", "H", "dim", 0, "input height H"),
    ("w", "W", "dim", 0, "input width W"),
    ("k", "K", "dim", 0, "output channels K"),
    ("r", "R", "dim", 0, "kernel height R"),
    ("s", "S", "dim", 0, "kernel width S"),
    ("stride_h", "STRIDE_H", "dim", 1, "vertical stride"),
    ("stride_w", "STRIDE_W", "dim", 1, "horizontal stride"),
    ("pad_h", "PAD_H", "dim", 0, "vertical padding (each side)"),
    ("pad_w", "PAD_W", "dim", 0, "horizontal padding (each side)"),
    ("dil_h", "DIL_H", "dim", 1, "vertical dilation"),
    ("dil_w", "DIL_W", "dim", 1, "horizontal dilation"),
    ("addr_x", "ADDR_X", "addr", 0, "byte address of X (N x C x H x W)"),
    ("addr_w", "ADDR_W", "addr", 0, "byte address of W (K x C x R x S)"),
    ("addr_dy", "ADDR_DY", "addr", 0, "byte address of dY (N x K x OH x OW; loss, gradient)"),
    ("addr_out", "ADDR_OUT", "addr", 0, "byte address of the output (Y, dX or dW)"),
)

#: Performance counters, 64 bits each, in register order (fed from the ``counters`` input).
COUNTERS = (
    ("cycles", "cycles since the counters were cleared"),
    ("busy_cycles", "cycles with a descriptor running"),
    ("compute_cycles", "cycles the array computed (any valid slot)"),
    ("stall_cycles", "cycles the operand paths stalled the array"),
    ("macs", "multiply-accumulates performed"),
    ("gated_macs", "multiply-accumulates skipped by zero gating"),
    ("dma_read_bytes", "payload bytes the DMA read from external memory"),
    ("dma_write_bytes", "payload bytes the DMA wrote to external memory"),
    ("dma_busy_cycles", "cycles the DMA had a command in flight"),
    ("buf_a_reads", "buffer A words read"),
    ("buf_a_writes", "buffer A words written"),
    ("buf_b_reads", "buffer B words read"),
    ("buf_b_writes", "buffer B words written"),
    ("buf_p_reads", "buffer P words read"),
    ("buf_p_writes", "buffer P words written"),
    ("overlap_cycles", "cycles the DMA had a command in flight while an engine computed"),
)

_DESC_BASE = 0x040
_COUNTER_BASE = 0x100


@dataclass(frozen=True)
class Register:
    """One 32-bit register of the map.

    ``kind`` says where its value comes from: ``"const"`` (ID, VERSION, CFG_*: ``reset`` is
    the value, which may depend on the configuration), ``"control"``, ``"status"``,
    ``"desc"`` (``field`` names the descriptor field), ``"setting"`` (a read-write register
    driving the output ``field`` directly), ``"counter_lo"`` / ``"counter_hi"`` (``field``
    names the counter).
    """
    name: str
    offset: int
    access: str         # "ro", "rw" or "wo"
    kind: str
    doc: str
    field: str = None
    width: str = None   # descriptor and setting registers: "dim", "phase" or "addr"
    reset: int = 0


def _build_registers():
    regs = [
        Register("ID", 0x000, "ro", "const", 'identification, 0x42505341 ("BPSA")'),
        Register("VERSION", 0x004, "ro", "const", "register-map version, major << 16 | minor"),
        Register("CFG_ARRAY", 0x008, "ro", "const",
                 "rows [7:0], cols [15:8], operand_width [23:16], acc_width [31:24]"),
        Register("CFG_FEATURES", 0x00C, "ro", "const",
                 "dataflows os/ws/is/interleaved [3:0], operand_signed [4], zero_gating [5], "
                 "reserve_registers [6], dim_width [12:8], log2(feeder_bus_width) [18:16]"),
        Register("CFG_BUFFERS", 0x010, "ro", "const",
                 "log2 buf_a_depth [4:0], log2 buf_b_depth [12:8], log2 buf_p_depth [20:16]"),
        Register("CONTROL", 0x020, "wo", "control",
                 "START [0]: run the descriptor (ignored while busy); CLEAR [1]: clear DONE, "
                 "ERROR and the counters"),
        Register("STATUS", 0x024, "ro", "status", "BUSY [0], DONE [1] (sticky), ERROR [15:8]"),
        Register("WINDOW_LO", 0x028, "rw", "setting",
                 "lowest external byte address the DMA may touch", field="window_lo",
                 width="addr", reset=0),
        Register("WINDOW_HI", 0x02C, "rw", "setting",
                 "highest external byte address the DMA may touch (inclusive)",
                 field="window_hi", width="addr", reset=0xFFFF_FFFF),
    ]
    for i, (field, name, width, reset, doc) in enumerate(DESCRIPTOR_FIELDS):
        regs.append(Register(name, _DESC_BASE + 4 * i, "rw", "desc", doc, field=field,
                             width=width, reset=reset))
    for i, (name, doc) in enumerate(COUNTERS):
        off = _COUNTER_BASE + 8 * i
        regs.append(Register(f"{name.upper()}_LO", off, "ro", "counter_lo",
                             f"{doc}, bits [31:0] (latches the high half)", field=name))
        regs.append(Register(f"{name.upper()}_HI", off + 4, "ro", "counter_hi",
                             f"{doc}, bits [63:32]", field=name))
    offsets = [r.offset for r in regs]
    assert len(set(offsets)) == len(offsets) and max(offsets) < 2 ** ADDR_WIDTH
    return tuple(regs)


#: The register map: every register, in offset order.
REGISTERS = _build_registers()

#: Register name -> byte offset (what a host driver needs).
REGISTER_MAP = {r.name: r.offset for r in REGISTERS}

#: STATUS fields: name -> (lsb, width).
STATUS_FIELDS = {"BUSY": (0, 1), "DONE": (1, 1), "ERROR": (8, 8)}

#: CONTROL bits: name -> bit.
CONTROL_BITS = {"START": 0, "CLEAR": 1}


def _check_config(config):
    if not isinstance(config, Config):
        raise TypeError(f"config must be a Config, not {config!r}")
    return config


def config_words(config):
    """Values of the constant registers (ID, VERSION, CFG_*) for ``config``: name -> int."""
    _check_config(config)
    flows = sum(1 << i for i, d in enumerate(("os", "ws", "is", "interleaved"))
                if config.has(d))
    return {
        "ID": ID_VALUE,
        "VERSION": MAP_VERSION[0] << 16 | MAP_VERSION[1],
        "CFG_ARRAY": config.rows | config.cols << 8 | config.operand_width << 16
        | config.acc_width << 24,
        "CFG_FEATURES": flows | config.operand_signed << 4 | config.zero_gating << 5
        | config.reserve_registers << 6 | config.dim_width << 8
        | exact_log2(config.feeder_bus_width) << 16,
        "CFG_BUFFERS": exact_log2(config.buf_a_depth) | exact_log2(config.buf_b_depth) << 8
        | exact_log2(config.buf_p_depth) << 16,
    }


def _field_bits(config, width):
    return {"dim": config.dim_width, "phase": Phase.as_shape().width, "addr": 32}[width]


def descriptor_layout(config):
    """Layout of the ``desc`` output: the fields of :data:`DESCRIPTOR_FIELDS` in order (first
    at bit 0); ``phase`` is a :class:`Phase`, shapes ``dim_width`` bits, addresses 32 bits, all
    unsigned."""
    _check_config(config)
    return data.StructLayout({
        field: (Phase if width == "phase" else unsigned(_field_bits(config, width)))
        for field, _, width, _, _ in DESCRIPTOR_FIELDS
    })


def counter_layout():
    """Layout of the ``counters`` input: one unsigned 64-bit field per :data:`COUNTERS` name."""
    return data.StructLayout({name: unsigned(64) for name, _ in COUNTERS})


def register_map(config):
    """The register map as a JSON-ready dict for a host driver: ``registers`` (name ->
    offset, access, reset value, doc, and ``bits`` for descriptor registers), ``status`` and
    ``control`` bit fields, ``descriptor`` (field -> register), ``counters`` (names in order),
    ``addr_width``, ``id``, ``version``."""
    consts = config_words(config)
    regs = {}
    for r in REGISTERS:
        entry = {"offset": r.offset, "access": r.access, "doc": r.doc,
                 "reset": consts.get(r.name, r.reset)}
        if r.kind in ("desc", "setting"):
            entry["bits"] = _field_bits(config, r.width)
        regs[r.name] = entry
    return {
        "addr_width": ADDR_WIDTH,
        "id": ID_VALUE,
        "version": list(MAP_VERSION),
        "registers": regs,
        "status": {k: list(v) for k, v in STATUS_FIELDS.items()},
        "control": dict(CONTROL_BITS),
        "descriptor": {field: name for field, name, _, _, _ in DESCRIPTOR_FIELDS},
        "counters": [name for name, _ in COUNTERS],
        "phases": {p.name.lower(): p.value for p in Phase},
    }


# --- the hardware ----------------------------------------------------------------------------

class RegisterFile(wiring.Component):
    """AXI4-Lite slave with the register map of this module (see the module docstring for
    every register and for the bus behaviour).

    Members
    -------
    axil : In(axi_lite_signature(ADDR_WIDTH, 32))
        The host bus (Verilog ports ``axil__awaddr`` ...). ``bvalid`` and ``rvalid`` are
        registers and never depend on ``bready`` / ``rready``.
    desc : Out(descriptor_layout(config))
        The descriptor, copied from the descriptor registers when START is accepted; stable
        until the next accepted START.
    start : Out(1)
        One-cycle pulse in the cycle after an accepted START (``desc`` already holds the new
        descriptor in that cycle).
    clear : Out(1)
        One-cycle pulse in the cycle after a CLEAR write.
    busy : In(1)
        The controller runs a descriptor. It must rise no later than the cycle after ``start``.
    done : In(1)
        One-cycle pulse: the descriptor finished (successfully or not).
    error : In(8)
        Error code, sampled with ``done`` (0 = no error).
    counters : In(counter_layout())
        Performance counter values.
    window_lo, window_hi : Out(32)
        The WINDOW_LO / WINDOW_HI registers (for the DMA engine's address window).
    """

    def __init__(self, config):
        self.config = _check_config(config)
        super().__init__({
            "axil": In(axi_lite_signature(ADDR_WIDTH, 32)),
            "desc": Out(descriptor_layout(config)),
            "start": Out(1),
            "clear": Out(1),
            "busy": In(1),
            "done": In(1),
            "error": In(8),
            "counters": In(counter_layout()),
            "window_lo": Out(32),
            "window_hi": Out(32),
        })

    def elaborate(self, platform):
        cfg = self.config
        bus = self.axil
        m = Module()
        consts = config_words(cfg)

        # Descriptor registers (staging copy, visible to the host) and settings.
        regs = {}
        for r in REGISTERS:
            if r.kind in ("desc", "setting"):
                regs[r.field] = Signal(_field_bits(cfg, r.width), init=r.reset,
                                       name=f"reg_{r.field}")
        settings = [r.field for r in REGISTERS if r.kind == "setting"]
        m.d.comb += [getattr(self, f).eq(regs[f]) for f in settings]

        done_flag = Signal()
        error_code = Signal(8)
        snap_hi = Signal(32)
        snap_idx = Signal(range(len(COUNTERS) + 1), init=len(COUNTERS))

        m.d.sync += [self.start.eq(0), self.clear.eq(0)]
        with m.If(self.done):
            m.d.sync += [done_flag.eq(1), error_code.eq(self.error)]

        # --- write channel: AW and W are taken independently, then the write is done -------
        aw_held = Signal()
        aw_word = Signal(ADDR_WIDTH - 2)
        w_held = Signal()
        w_data = Signal(32)
        w_strb = Signal(4)
        b_valid = Signal()
        b_resp = Signal(AxiResp)
        m.d.comb += [
            bus.awready.eq(~aw_held), bus.wready.eq(~w_held),
            bus.bvalid.eq(b_valid), bus.bresp.eq(b_resp),
        ]
        with m.If(bus.awvalid & ~aw_held):
            m.d.sync += [aw_held.eq(1), aw_word.eq(bus.awaddr[2:])]
        with m.If(bus.wvalid & ~w_held):
            m.d.sync += [w_held.eq(1), w_data.eq(bus.wdata), w_strb.eq(bus.wstrb)]
        with m.If(b_valid & bus.bready):
            m.d.sync += b_valid.eq(0)

        with m.If(aw_held & w_held & ~b_valid):
            m.d.sync += [aw_held.eq(0), w_held.eq(0), b_valid.eq(1), b_resp.eq(AxiResp.OKAY)]
            with m.Switch(aw_word):
                for r in REGISTERS:
                    with m.Case(r.offset >> 2):
                        if r.kind in ("desc", "setting"):
                            reg = regs[r.field]
                            for lane in range(4):
                                lo, hi = 8 * lane, min(8 * lane + 8, len(reg))
                                if lo >= hi:
                                    continue
                                with m.If(w_strb[lane]):
                                    m.d.sync += reg[lo:hi].eq(w_data[lo:hi])
                        elif r.kind == "control":
                            with m.If(w_strb[0]):
                                with m.If(w_data[CONTROL_BITS["START"]] & ~self.busy):
                                    m.d.sync += [self.start.eq(1), done_flag.eq(0),
                                                 error_code.eq(0)]
                                    m.d.sync += [getattr(self.desc, f).eq(v)
                                                 for f, v in regs.items()
                                                 if f not in settings]
                                with m.If(w_data[CONTROL_BITS["CLEAR"]]):
                                    m.d.sync += [self.clear.eq(1), done_flag.eq(0),
                                                 error_code.eq(0)]
                with m.Default():
                    m.d.sync += b_resp.eq(AxiResp.SLVERR)

        # --- read channel ---------------------------------------------------------------
        r_valid = Signal()
        r_data = Signal(32)
        r_resp = Signal(AxiResp)
        m.d.comb += [
            bus.arready.eq(~r_valid),
            bus.rvalid.eq(r_valid), bus.rdata.eq(r_data), bus.rresp.eq(r_resp),
        ]
        with m.If(r_valid & bus.rready):
            m.d.sync += r_valid.eq(0)
        counter_index = {name: i for i, (name, _) in enumerate(COUNTERS)}
        with m.If(bus.arvalid & ~r_valid):
            m.d.sync += [r_valid.eq(1), r_resp.eq(AxiResp.OKAY), r_data.eq(0),
                         snap_idx.eq(len(COUNTERS))]
            with m.Switch(bus.araddr[2:]):
                for r in REGISTERS:
                    with m.Case(r.offset >> 2):
                        if r.kind == "const":
                            m.d.sync += r_data.eq(Const(consts[r.name], 32))
                        elif r.kind == "status":
                            m.d.sync += r_data.eq(Cat(self.busy, done_flag, Const(0, 6),
                                                      error_code))
                        elif r.kind in ("desc", "setting"):
                            m.d.sync += r_data.eq(regs[r.field])
                        elif r.kind == "counter_lo":
                            value = getattr(self.counters, r.field)
                            m.d.sync += [r_data.eq(value[:32]), snap_hi.eq(value[32:]),
                                         snap_idx.eq(counter_index[r.field])]
                        elif r.kind == "counter_hi":
                            value = getattr(self.counters, r.field)
                            with m.If(snap_idx == counter_index[r.field]):
                                m.d.sync += r_data.eq(snap_hi)
                            with m.Else():
                                m.d.sync += r_data.eq(value[32:])
                        # "control" (write-only) reads 0.
                with m.Default():
                    m.d.sync += r_resp.eq(AxiResp.SLVERR)
        return m
