"""The register map of the accelerator: identification and configuration words, control,
status, the DMA window, the layer's program and the performance counters: what the hardware
reads and what it reports, nothing else. Pure Python: the register file
(:mod:`bpsa.gateware.bus.axi_lite`) decodes this table and the host driver reads it, as
:data:`REGISTER_MAP` (name -> byte offset) or as :func:`register_map` (a JSON-ready dict with
access, reset values and field descriptions), so both sides read the same truth.

A layer reaches the hardware only as its program (:mod:`bpsa.spec.isa`): its fields
(:data:`LAYER_FIELDS`) are SET instructions, not registers. Map version 3.0 dropped the
descriptor registers (0x040-0x098 of versions 1 and 2) that the hardware no longer read.

Register map (byte offsets; all registers 32 bits, accessed as aligned words):

============== ======= ======  =================================================================
name           offset  access  contents
============== ======= ======  =================================================================
ID             0x000   RO      ``0x42505341`` ("BPSA")
VERSION        0x004   RO      register-map version, ``major << 16 | minor``
CFG_ARRAY      0x008   RO      rows [7:0], cols [15:8], operand_width [23:16], acc_width [31:24]
CFG_FEATURES   0x00C   RO      dataflows os/ws/is/interleaved [3:0], operand_signed [4],
                               zero_gating [5], reserve_registers [6], dim_width [12:8],
                               log2(feeder_bus_width) [18:16], backward modes generated:
                               BP-im2col [20], zero-free [21]; pooling kinds: max [22],
                               avg [23]; channel-first forward front end [24]; arithmetic
                               [26:25]: 0 int, 1 bf16, 2 fp16, 3 an OCP MX format; pooling
                               unit of ``cols`` lanes [27] (``pool_lanes``); the MX element
                               format [29:28]: 0 MXINT8, 1 MXFP8 E4M3
CFG_BUFFERS    0x010   RO      log2 of buf_a_depth [4:0], buf_b_depth [12:8], buf_p_depth [20:16];
                               log2(dma_data_width / 64) [25:24]; log2(buf_pool_depth) [31:27]
CONTROL        0x020   WO      START [0], CLEAR [1]; writes act, reads return 0
STATUS         0x024   RO      BUSY [0], DONE [1], ERROR [15:8]
WINDOW_LO      0x028   RW      lowest external byte address the DMA may touch (reset 0)
WINDOW_HI      0x02C   RW      highest such address, inclusive (reset 0xFFFFFFFF)
PROG_ADDR      0x030   RW      byte address of the layer's program
PROG_WORDS     0x034   RW      its length in instructions (:mod:`bpsa.spec.isa`)
<counter>_LO   0x100.. RO      low half of 64-bit counter ``i`` at ``0x100 + 8 i``
<counter>_HI   +4      RO      high half (see "Counters")
============== ======= ======  =================================================================

Counters, 8 bytes apart from 0x100 (:data:`COUNTERS`): CYCLES, BUSY_CYCLES, COMPUTE_CYCLES,
STALL_CYCLES, MACS, GATED_MACS, DMA_READ_BYTES, DMA_WRITE_BYTES, DMA_BUSY_CYCLES,
BUF_A_READS, BUF_A_WRITES, BUF_B_READS, BUF_B_WRITES, BUF_P_READS, BUF_P_WRITES,
OVERLAP_CYCLES, PROG_READ_BYTES (from START). A ``_LO`` read returns a sample the counter
held between the read's address and its data (the counters live in a RAM swept one a cycle,
:mod:`bpsa.gateware.control.counter_bank`: the answer takes up to ``len(COUNTERS) + 6``
cycles) and latches its high half for the ``_HI`` read right after; counters that stopped
(after DONE) read exactly. CLEAR zeroes them, dropping the events of its own cycle.

The layer's fields (:data:`LAYER_FIELDS`; the driver's descriptor names them by their key,
``PHASE``, ``N``, ...): requantization (REQUANT = 1; the forward and the zero-free loss,
whose outputs feed the next layer, and the pooling phases; other phases refuse it with
``REQUANT``): every accumulator of the output leaves as an ``operand_width``-bit operand,
``round(acc / 2**OUT_SHIFT)`` with halves rounded up, saturated to the operand range
(:func:`bpsa.models.golden.requantize`), ``element_bytes(operand_width)`` bytes an element in
the output's layout instead of ``element_bytes(acc_width)``. ReLU (RELU = 1; the forward and
the pooling phases, others refuse it with ``RELU``): the forward and the pooling forward
store ``max(0, v)`` of every output element (after the requantization); the pooling backward
sets dX to 0 wherever its X is not positive (the ReLU's backward when X is the ReLU's
output), and stores the rest unchanged.
"""

import enum
from dataclasses import dataclass

__all__ = [
    "ADDR_WIDTH", "ARITHMETIC_CODES", "ARITHMETIC_SHIFT", "MX_FORMAT_CODES", "MX_FORMAT_SHIFT",
    "arithmetic_of", "CONTROL_BITS", "COUNTERS", "DATAFLOW_BITS", "ID_VALUE",
    "LAYER_DEFAULTS", "LAYER_FIELDS",
    "FORWARD_MODE_NAMES", "MAP_VERSION", "MODE_BITS", "MODE_NAMES", "Mode", "PHASE_BITS", "POOL_KIND_NAMES", "Phase",
    "PoolKind", "REGISTERS", "REGISTER_MAP", "Register",
    "STATUS_FIELDS", "config_words", "field_bits", "register_map",
]

#: Bits of the register file's byte address (a 4 KiB aperture).
ADDR_WIDTH = 12

#: Value of the ID register: "BPSA" in ASCII.
ID_VALUE = 0x42505341

#: Register-map version (major, minor): a driver refuses a different major version.
MAP_VERSION = (3, 1)


class Phase(enum.IntEnum):
    """The PHASE descriptor field: which pass of a layer to run. Values 6..15 are reserved
    (a controller refuses them)."""
    FORWARD = 0
    LOSS = 1
    GRADIENT = 2
    FC_BACKWARD = 3
    POOL_FORWARD = 4
    POOL_BACKWARD = 5


class PoolKind(enum.IntEnum):
    """The POOL_KIND descriptor field (pooling phases). Global average pooling is ``AVG``
    with the whole plane as the window."""
    MAX = 0
    AVG = 1


#: Configuration names of the pooling kinds (``Config.pool_kinds``).
POOL_KIND_NAMES = {PoolKind.MAX: "max", PoolKind.AVG: "avg"}


#: Bits of the PHASE field.
PHASE_BITS = 4


class Mode(enum.IntEnum):
    """The MODE descriptor field: how the phase is computed (the FC backward and pooling
    ignore it). Loss and gradient: ``BP_IM2COL``, the paper's NZ-detecting address generators
    on the input-stationary array (zero-spaces skipped in memory, gated in the array), or
    ``ZERO_FREE``, the zero-free walkers on the output-stationary array (no inserted zero is
    read, sent or multiplied; channel-blocked tensors, see :mod:`bpsa.gateware.accelerator`).
    Forward: 0 (``FEEDER``, the same value as ``BP_IM2COL``), the Fornt data feeder on the
    output-stationary array, or ``CHANNEL_FIRST``, the channel-first implicit im2col on the
    weight-stationary array (X channel-blocked HWC). A mode the configuration does not
    generate for the phase is refused (``MODE``)."""
    BP_IM2COL = 0
    ZERO_FREE = 1
    CHANNEL_FIRST = 2


#: The forward's modes: value -> the front end's configuration name (``forward_frontends``).
FORWARD_MODE_NAMES = {0: "feeder", Mode.CHANNEL_FIRST: "channel_first"}


#: Bits of the MODE field.
MODE_BITS = 2

#: Configuration / command-line names of the modes (``Config.backward_modes``).
MODE_NAMES = {Mode.BP_IM2COL: "bp_im2col", Mode.ZERO_FREE: "zero_free"}

#: CFG_FEATURES bits [3:0]: one per dataflow, in this order.
DATAFLOW_BITS = ("os", "ws", "is", "interleaved")

#: CFG_FEATURES bits [26:25]: the number format (``Config.arithmetic``; 3: an OCP MX format,
#: which :data:`MX_FORMAT_CODES` names).
ARITHMETIC_CODES = {"int": 0, "bf16": 1, "fp16": 2, "mxint8": 3, "mxfp8_e4m3": 3}
#: CFG_FEATURES bits [29:28]: the MX element format (arithmetic code 3).
MX_FORMAT_CODES = {"mxint8": 0, "mxfp8_e4m3": 1}
#: Where the MX element format's code sits in CFG_FEATURES.
MX_FORMAT_SHIFT = 28
#: Where the arithmetic's code sits in CFG_FEATURES.
ARITHMETIC_SHIFT = 25
#: CFG_FEATURES bit [27]: the pooling unit computes ``cols`` planes at once (``pool_lanes``;
#: the host lays its tensors out channel-blocked by them).
POOL_LANES_BIT = 27


#: The layer's fields, in the order of the program's ``layer`` struct (:mod:`bpsa.spec.isa`):
#: (field name, descriptor key, width kind, default, doc). The key names the field in the
#: driver's descriptor (:meth:`bpsa.host.driver.Driver.start`); a field the descriptor leaves
#: out takes its default. They are not registers (map version 3.0). Width kind ``"dim"`` is ``dim_width`` bits, ``"phase"`` 4 bits, ``"mode"`` 2 bits,
#: ``"addr"`` 32 bits, ``"flag"`` 1 bit, ``"shift"`` the bits of ``acc_width - 1``.
LAYER_FIELDS = (
    ("phase", "PHASE", "phase", 0,
     "Phase: 0 forward, 1 loss, 2 gradient, 3 FC backward, 4 pooling forward, "
     "5 pooling backward"),
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
    ("mode", "MODE", "mode", 0, "backward mode: 0 BP-im2col, 1 zero-free (loss, gradient)"),
    ("requant", "REQUANT", "flag", 0,
     "1: the output leaves as operands, requantized (forward, zero-free loss)"),
    ("out_shift", "OUT_SHIFT", "shift", 0,
     "right shift of the requantization (rounded half up, saturated)"),
    ("relu", "RELU", "flag", 0,
     "1: forward phases store max(0, v); the pooling backward masks dX where X <= 0"),
    ("pool_kind", "POOL_KIND", "mode", 0, "pooling phases: 0 max, 1 avg"),
)

#: Descriptor key -> default of every layer field.
LAYER_DEFAULTS = {key: default for _, key, _, default, _ in LAYER_FIELDS}

#: Performance counters, 64 bits each, in register order (fed from the ``counters`` input).
COUNTERS = (
    ("cycles", "cycles since the counters were cleared"),
    ("busy_cycles", "cycles with a layer running"),
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
    ("prog_read_bytes", "bytes of the layer's program the DMA fetched (not in DMA_READ_BYTES)"),
)

_COUNTER_BASE = 0x100


@dataclass(frozen=True)
class Register:
    """One 32-bit register of the map.

    ``kind`` says where its value comes from: ``"const"`` (ID, VERSION, CFG_*: ``reset`` is
    the value, which may depend on the configuration), ``"control"``, ``"status"``,
    ``"setting"`` (a read-write register driving the output ``field`` directly), ``"counter_lo"`` / ``"counter_hi"`` (``field``
    names the counter).
    """
    name: str
    offset: int
    access: str         # "ro", "rw" or "wo"
    kind: str
    doc: str
    field: str = None
    width: str = None   # setting registers: their width kind (:func:`field_bits`)
    reset: int = 0


def _build_registers():
    regs = [
        Register("ID", 0x000, "ro", "const", 'identification, 0x42505341 ("BPSA")'),
        Register("VERSION", 0x004, "ro", "const", "register-map version, major << 16 | minor"),
        Register("CFG_ARRAY", 0x008, "ro", "const",
                 "rows [7:0], cols [15:8], operand_width [23:16], acc_width [31:24]"),
        Register("CFG_FEATURES", 0x00C, "ro", "const",
                 "dataflows os/ws/is/interleaved [3:0], operand_signed [4], zero_gating [5], "
                 "reserve_registers [6], dim_width [12:8], log2(feeder_bus_width) [18:16], "
                 "backward modes BP-im2col [20], zero-free [21], pooling max [22], avg [23], "
                 "channel-first forward front end [24], arithmetic [26:25], pooling lanes = "
                 "cols [27]"),
        Register("CFG_BUFFERS", 0x010, "ro", "const",
                 "log2 buf_a_depth [4:0], log2 buf_b_depth [12:8], log2 buf_p_depth [20:16], "
                 "log2(dma_data_width / 64) [25:24], log2 buf_pool_depth [31:27]"),
        Register("CONTROL", 0x020, "wo", "control",
                 "START [0]: run the program at PROG_ADDR (ignored while busy); CLEAR [1]: clear DONE, "
                 "ERROR and the counters"),
        Register("STATUS", 0x024, "ro", "status", "BUSY [0], DONE [1] (sticky), ERROR [15:8]"),
        Register("WINDOW_LO", 0x028, "rw", "setting",
                 "lowest external byte address the DMA may touch", field="window_lo",
                 width="addr", reset=0),
        Register("WINDOW_HI", 0x02C, "rw", "setting",
                 "highest external byte address the DMA may touch (inclusive)",
                 field="window_hi", width="addr", reset=0xFFFF_FFFF),
        Register("PROG_ADDR", 0x030, "rw", "setting",
                 "byte address of the layer's program (bpsa.spec.isa; a multiple of 8)",
                 field="prog_addr", width="addr", reset=0),
        Register("PROG_WORDS", 0x034, "rw", "setting",
                 "instructions in the layer's program", field="prog_words", width="addr",
                 reset=0),
    ]
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




def _log2(n):
    return n.bit_length() - 1


def config_words(config):
    """Values of the constant registers (ID, VERSION, CFG_*) for ``config``: name -> int."""
    flows = sum(1 << i for i, d in enumerate(DATAFLOW_BITS) if config.has(d))
    return {
        "ID": ID_VALUE,
        "VERSION": MAP_VERSION[0] << 16 | MAP_VERSION[1],
        "CFG_ARRAY": config.rows | config.cols << 8 | config.operand_width << 16
        | config.acc_width << 24,
        "CFG_FEATURES": flows | config.operand_signed << 4 | config.zero_gating << 5
        | config.reserve_registers << 6 | config.dim_width << 8
        | _log2(config.feeder_bus_width) << 16
        | sum(1 << (20 + m) for m, name in MODE_NAMES.items() if name in config.backward_modes
              and (name == "zero_free" or not config.is_mx))    # MX: what it generates
        | sum(1 << (22 + k) for k, name in POOL_KIND_NAMES.items()
              if name in config.pool_kinds and not config.is_mx)
        | config.has_frontend("channel_first") << 24
        | ARITHMETIC_CODES[config.arithmetic] << ARITHMETIC_SHIFT
        | (config.pool_lanes > 1) << POOL_LANES_BIT
        | MX_FORMAT_CODES.get(config.arithmetic, 0) << MX_FORMAT_SHIFT,
        "CFG_BUFFERS": _log2(config.buf_a_depth) | _log2(config.buf_b_depth) << 8
        | _log2(config.buf_p_depth) << 16 | _log2(config.dma_data_width // 64) << 24
        | _log2(config.buf_pool_depth) << 27,
    }


def field_bits(config, width):
    """Bits of a layer field or setting register of width kind ``width`` (``"dim"``,
    ``"phase"``, ``"mode"``, ``"addr"``, ``"flag"`` or ``"shift"``)."""
    return {"dim": config.dim_width, "phase": PHASE_BITS, "mode": MODE_BITS, "addr": 32,
            "flag": 1, "shift": (config.acc_width - 1).bit_length()}[width]


def register_map(config):
    """The register map as a JSON-ready dict for a host driver: ``registers`` (name ->
    offset, access, reset value, doc, and ``bits`` for the settings), ``status`` and
    ``control`` bit fields, ``descriptor`` (layer field -> its descriptor key), ``counters``
    (names in order),
    ``addr_width``, ``id``, ``version``."""
    consts = config_words(config)
    regs = {}
    for r in REGISTERS:
        entry = {"offset": r.offset, "access": r.access, "doc": r.doc,
                 "reset": consts.get(r.name, r.reset)}
        if r.kind == "setting":
            entry["bits"] = field_bits(config, r.width)
        regs[r.name] = entry
    return {
        "addr_width": ADDR_WIDTH,
        "id": ID_VALUE,
        "version": list(MAP_VERSION),
        "registers": regs,
        "status": {k: list(v) for k, v in STATUS_FIELDS.items()},
        "control": dict(CONTROL_BITS),
        "descriptor": {field: key for field, key, _, _, _ in LAYER_FIELDS},
        "counters": [name for name, _ in COUNTERS],
        "phases": {p.name.lower(): p.value for p in Phase},
        "modes": {MODE_NAMES[m]: m.value for m in MODE_NAMES},
        "forward_modes": {name: int(v) for v, name in FORWARD_MODE_NAMES.items()},
        "pool_kinds": {POOL_KIND_NAMES[k]: k.value for k in PoolKind},
    }


def arithmetic_of(features):
    """The ``Config.arithmetic`` a CFG_FEATURES value states (``None`` for an unknown code)."""
    code = features >> ARITHMETIC_SHIFT & 3
    if code == 3:
        fmt = features >> MX_FORMAT_SHIFT & 3
        return next((n for n, c in MX_FORMAT_CODES.items() if c == fmt), None)
    return next((n for n, c in ARITHMETIC_CODES.items() if c == code), None)
